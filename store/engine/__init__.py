"""The parts the message store facade (store.message_store) is made of, one concern each."""

"""The record format: RocketMQ's byte layouts, the codec and its compiled loops, message ids,
properties, topic names and the delivery-time rules a record's consume queue unit follows."""

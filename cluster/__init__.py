"""The live-cluster side of mqlens: talking to RocketMQ name servers and brokers."""

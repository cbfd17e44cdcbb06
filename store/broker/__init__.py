"""Broker semantics over the log and its projections: topics and groups, offsets, pull, push and
pop consumers, retries, delayed and timed delivery, duplicate suppression, the lifecycle trace."""

"""What dispatch projects from the commit log: consume queues and index files, and the check
that they agree with it."""

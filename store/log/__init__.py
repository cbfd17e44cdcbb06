"""The commit log and its files: mapped segments, recovery, the checkpoint, flushing, retention,
the disk guard, the store's paths, geometry and configuration files."""

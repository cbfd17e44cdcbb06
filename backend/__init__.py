"""What the console's services ask of the messaging system, and the embedded store's answers."""

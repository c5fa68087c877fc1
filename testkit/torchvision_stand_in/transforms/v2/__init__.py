"""Stand-in namespace."""

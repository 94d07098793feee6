"""Small helpers every layer of the package may use: atomic file writes, JSON lines, the code commit."""

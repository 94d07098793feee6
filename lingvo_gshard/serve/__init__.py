"""Using a trained run: translation of text, and its export as a SavedModel."""

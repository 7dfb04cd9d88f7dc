"""The objects an Evaluation or an agent owns, as plain dicts (pure): built, and read back."""

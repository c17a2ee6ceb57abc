"""trajpriv models."""

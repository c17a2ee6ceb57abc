"""trajpriv jobs."""

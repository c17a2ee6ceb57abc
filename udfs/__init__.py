"""trajpriv udfs."""

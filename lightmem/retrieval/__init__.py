"""Read path: pure scoring functions, the two-stage engine, selectors and the composer."""

"""The local broker's wire tests."""

"""profiles: filled in by later issues (see ../shared/docs/ARCHITECTURE.md)."""

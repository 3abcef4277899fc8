"""The Flask experiment server: sessions, assignment, per-trial storage, admin and export."""

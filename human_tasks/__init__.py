"""Timed procedures for people: the PsychoPy lab runner and the web task's templates and JavaScript."""

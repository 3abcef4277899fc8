"""Stimuli: image sources, transforms, generators and the designs that turn them into experiments."""

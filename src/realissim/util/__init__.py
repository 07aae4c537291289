"""Utilities with no knowledge of robots or scenes: threads, worker processes, signals, images, torch settings."""

"""Evaluation: sync metrics against ground truth (oracle), success rates, reports."""

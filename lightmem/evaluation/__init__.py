"""Evaluation: pure metrics, benchmark runners, reports."""

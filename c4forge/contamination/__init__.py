"""Evaluation-set contamination: word n-grams of benchmark examples, the clean
plan's ``decontaminate`` stage, and the `c4forge contamination` report."""

"""`c4forge report`: the datasheet of a clean corpus (HTML page, figures, report.json, a
dataset-card README.md)."""

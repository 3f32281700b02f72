"""`c4forge report CLEAN_DIR -o REPORT_DIR`: the corpus datasheet (placeholder, filled below)."""

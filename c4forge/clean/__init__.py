"""`c4forge clean` as a chain: config (CleanJob) → plan (ordered stages) → driver (inputs,
finished-run check, resume, stats, summary) → an engine (``c4forge.engines``) running the plan."""

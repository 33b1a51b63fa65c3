"""Plain data: result records, the failure rule, artifacts in transit, class paths, known classes, checks."""

"""The Promela model of the readmission protocol and its runner (make verify)."""

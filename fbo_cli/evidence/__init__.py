"""Evidence: the report, figures, check, witness, reproduction."""

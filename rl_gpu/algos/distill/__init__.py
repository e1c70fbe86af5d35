"""Teacher-student distillation (``--algo distill --teacher RUN/seed-N/best.pt``)."""

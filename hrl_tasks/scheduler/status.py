"""What a task can be: not done yet, or ended one of three ways."""

PENDING, FINISHED, FAILED, CANCELLED = "pending", "finished", "failed", "cancelled"
STATUSES = (PENDING, FINISHED, FAILED, CANCELLED)

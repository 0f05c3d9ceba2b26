"""The planner's error types for unusable input."""


class InputError(ValueError):
    """Input that cannot be used; the message names the object and the field."""


class NotFoundError(InputError):
    """Input that names an object the store does not hold (a plan, snapshot or cluster id)."""

"""The planner's one error type for unusable input."""


class InputError(ValueError):
    """Input that cannot be used; the message names the object and the field."""

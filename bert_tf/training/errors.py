"""The error of a training run that cannot start or go on (bad flags, bad data, a
checkpoint that cannot be restored, a non-finite loss): one line that says why and what to do."""





class TrainingError(ValueError):
  """A run that cannot start or go on; the message says why and what to do."""


class RunTerminated(BaseException):
  """A SIGTERM outside the training loop (which saves and exits 75 itself): raised in the main
  thread so that the run's cleanup runs (a BaseException: no `except Exception` swallows it)."""

"""The error of a training run that cannot start or go on (bad flags, bad data, a
checkpoint that cannot be restored, a non-finite loss): one line that says why and what to do."""





class TrainingError(ValueError):
  """A run that cannot start or go on; the message says why and what to do."""

"""Length buckets: the few sequence lengths a batch is cut to (`--length_buckets`).

A batch of records padded to max_seq_length is cut to its longest real row rounded up to the
next bucket boundary, so the model computes about as many positions as the text has while the
number of distinct shapes stays small: XLA (and any compiled program) builds one program per
boundary. Records on disk keep their fixed length; only the batches in memory are cut.

Pure Python (no TensorFlow), shared by the commands' flags, the tf.data pipelines and the
exports.

  auto   multiples of 8 up to 64, of 16 up to 128, of 32 up to 256, then of 64, each at most
         max_seq_length, and max_seq_length itself (128 -> 12 boundaries, 384 -> 18, 512 -> 20).
         Finer steps where text is short, where most fine-tuning text is: a batch whose longest
         row has 35 pieces computes 40 positions (48 with steps of 16). Without XLA the train
         step is traced once whatever the bucket; with --jit_compile XLA compiles one program
         per bucket met, at most the number above.
  none   every batch keeps max_seq_length (the original's shapes)
  LIST   comma-separated boundaries, e.g. 32,64,128 (max_seq_length is added if missing)
"""

from typing import Optional, Sequence, Tuple

AUTO = "auto"
NONE = "none"
FLAG_HELP = ("Cut each batch to its longest real row rounded up to one of these lengths: "
             "'auto' (multiples of 8 up to 64, of 16 up to 128, of 32 up to 256, then of 64; "
             "at most max_seq_length), 'none' (always max_seq_length, the original's shapes), or a "
             "comma-separated list. The outputs are the same; only the padding computed goes. "
             "With --use_tpu, 'auto' means none (TPUs want one static shape).")

# (up to this length, step) pairs of the auto ladder.
_AUTO_LADDER = ((64, 8), (128, 16), (256, 32), (1 << 30, 64))


class LengthBucketsError(ValueError):
  """A --length_buckets value that cannot be used; the message names the flag."""


def auto_buckets(max_seq_length: int) -> Tuple[int, ...]:
  """The 'auto' boundaries for max_seq_length (always ending with max_seq_length)."""
  boundaries = []
  length, previous_limit = 0, 0
  for limit, step in _AUTO_LADDER:
    length = max(length, previous_limit)
    while length + step <= min(limit, max_seq_length):
      length += step
      boundaries.append(length)
    previous_limit = limit
    if length >= max_seq_length:
      break
  if not boundaries or boundaries[-1] != max_seq_length:
    boundaries.append(max_seq_length)
  return tuple(boundaries)


def parse(value: Optional[str], max_seq_length: int, flag: str = "--length_buckets",
          use_tpu: bool = False) -> Optional[Tuple[int, ...]]:
  """The boundaries a flag value asks for, or None for fixed-length batches.

  Args:
    value: "auto", "none" (or "" / None), or comma-separated positive integers.
    max_seq_length: the records' length; boundaries above it are refused, and it is added as
      the last boundary.
    flag: the flag's name, for messages.
    use_tpu: TPUs compile one static shape: "auto" then means fixed length and a list is
      refused.

  Raises:
    LengthBucketsError: a value that is not one of the above.
  """
  text = (value or NONE).strip().lower()
  if text == NONE:
    return None
  if text == AUTO:
    return None if use_tpu else auto_buckets(max_seq_length)
  if use_tpu:
    raise LengthBucketsError(f"{flag}={value}: TPUs run one static shape; use auto or none "
                             "with --use_tpu")
  boundaries = []
  for part in text.split(","):
    part = part.strip()
    try:
      boundary = int(part)
    except ValueError:
      raise LengthBucketsError(f"{flag}={value}: {part!r} is not a length (expected auto, "
                               "none or comma-separated integers)") from None
    if not 1 <= boundary <= max_seq_length:
      raise LengthBucketsError(f"{flag}={value}: {boundary} is outside 1..{max_seq_length} "
                               "(--max_seq_length)")
    boundaries.append(boundary)
  return tuple(sorted(set(boundaries) | {max_seq_length}))


def bucket_for(length: int, boundaries: Sequence[int]) -> int:
  """The smallest boundary >= length (the last boundary for anything longer)."""
  for boundary in boundaries:
    if boundary >= length:
      return boundary
  return boundaries[-1]


def describe(boundaries: Optional[Sequence[int]], max_seq_length: int) -> str:
  """One line for the logs: which lengths batches can have, i.e. how many programs a step
  function compiles at most."""
  if boundaries is None:
    return f"fixed length {max_seq_length} (one shape)"
  return (f"cut to the longest row, rounded up to one of {','.join(map(str, boundaries))} "
          f"(at most {len(boundaries)} shapes per step function)")


def bucket_width_tensor(longest, boundaries: Sequence[int]):
  """In-graph bucket_for: int32 scalar tensor `longest` -> the smallest boundary >= it (the
  last boundary for anything longer). Imports TensorFlow when called."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  bounds = tf.constant(list(boundaries), tf.int32)
  index = tf.searchsorted(bounds, tf.reshape(tf.cast(longest, tf.int32), [1]), side="left")[0]
  return tf.gather(bounds, tf.minimum(index, len(boundaries) - 1))

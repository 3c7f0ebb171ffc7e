"""Altered copies of a task's labelled inputs, for a teacher to label (--distill_augment).

A distilled student learns from its teacher wherever the teacher is asked, not only where
there are labels: the more inputs the teacher labels, the more of what it knows reaches the
student. A task's own unlabelled text (--transfer_file) is the best such input; without it,
inputs can be made from the labelled ones. Each copy of an input keeps its words in order but
drops some, swaps some for words drawn from the task's training text (each word as often as it
occurs there), and sometimes keeps only a run of at least half of them. A copy is a plausible
input near a labelled one whose answer is not necessarily the label: the teacher's soft targets
say what it is, and the copies train on those alone (their label is the tasks' UNLABELLED).

This is the word-level augmentation of Tang et al. 2019 (arXiv 1903.12136: masking, swaps
within a part of speech, n-gram sampling; here without a part-of-speech tagger, and a dropped
word instead of a [MASK] the raw text cannot carry) that TinyBERT (arXiv 1909.10351) also
distils on. Everything is drawn from a `random.Random(seed)`: the same inputs, count and seed
give the same copies, so a resumed run writes the same training records.
"""

import dataclasses
import random
from typing import List, Sequence, Tuple

# An input: its texts (one for a sentence task, two for a pair), each a tuple of words.
Fields = Tuple[Tuple[str, ...], ...]


@dataclasses.dataclass(frozen=True)
class Alteration:
  """How a copy is made from an input: each word is dropped with probability `drop`, else
  swapped for a word of the training text with probability `swap`; then, with probability
  `span`, only a run of at least half the remaining words (a random length and start) is kept.
  A pair's texts are altered each on its own."""
  drop: float = 0.1
  swap: float = 0.1
  span: float = 0.25

  def __post_init__(self):
    for name in ("drop", "swap", "span"):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f"Alteration.{name} must be in [0, 1], got {getattr(self, name)}")
    if self.drop + self.swap > 1.0:
      raise ValueError(f"Alteration.drop + swap must be at most 1, got {self.drop + self.swap}")


DEFAULT = Alteration()

# Draws per wanted copy before an input is left with fewer copies: a one-word input has only
# as many distinct copies as the training text has words.
ATTEMPTS_PER_COPY = 10


def altered_copies(inputs: Sequence[Fields], copies: int, seed: int,
                   alteration: Alteration = DEFAULT) -> List[Tuple[int, Fields]]:
  """Up to `copies` distinct altered copies of each input, input by input.

  Args:
    inputs: the labelled inputs, each a tuple of texts (a tuple of words each).
    copies: copies wanted per input (>= 0).
    seed: the random generator's seed.
    alteration: how a copy is made.

  Returns:
    [(index of the input it was made from, its texts)], each copy different from every input
    and from every other copy, and no text of it empty. An input gets fewer than `copies` only
    when ATTEMPTS_PER_COPY draws per copy found no more (very short inputs).

  Raises:
    ValueError: negative `copies`.
  """
  if copies < 0:
    raise ValueError(f"copies must be >= 0, got {copies}")
  if not copies or not inputs:
    return []
  rng = random.Random(seed)
  # Every word occurrence of the training text: a uniform draw from it picks each word as
  # often as it occurs.
  pool = [word for fields in inputs for text in fields for word in text]
  seen = set(inputs)
  made = []
  for index, fields in enumerate(inputs):
    found = 0
    for _ in range(copies * ATTEMPTS_PER_COPY):
      copy = tuple(_altered(text, pool, rng, alteration) for text in fields)
      if copy in seen or not all(copy):
        continue
      seen.add(copy)
      made.append((index, copy))
      found += 1
      if found == copies:
        break
  return made


def _altered(text: Tuple[str, ...], pool: Sequence[str], rng: random.Random,
             alteration: Alteration) -> Tuple[str, ...]:
  words = []
  for word in text:
    draw = rng.random()
    if draw < alteration.drop:
      continue
    words.append(rng.choice(pool) if pool and draw < alteration.drop + alteration.swap
                 else word)
  if len(words) > 2 and rng.random() < alteration.span:
    length = rng.randint((len(words) + 1) // 2, len(words))
    start = rng.randrange(len(words) - length + 1)
    words = words[start:start + length]
  return tuple(words)


def copies_problems(copies: int, teacher, flag: str = "--distill_augment") -> List[str]:
  """The flag's problems, one line each: a negative count, or copies without a --teacher (they
  have no labels; only a teacher's soft targets train on them)."""
  if copies < 0:
    return [f"{flag} must be >= 0, got {copies}"]
  if copies and not teacher:
    return [f"{flag}={copies} makes inputs without labels: only a --teacher's soft targets "
            "train on them; add --teacher"]
  return []

r"""Learning a WordPiece vocabulary from a corpus, in the original BERT vocab layout.

The library half of data_prep/build_vocab.py.

The original release never shipped its vocabulary learner. This one splits words exactly as
bert_tf's tokenizer does (so every learned piece is reachable), counts them, and runs
tensorflow-text's WordPiece learner (a frequency-threshold search) on the counts.

Layout of the written vocab, as in the released BERT vocabs:
  [PAD], [unused0] .. [unused98], [UNK], [CLS], [SEP], [MASK], [unused99] .. [unused<N-1>],
  then the learned pieces (single characters, their ## forms, then pieces by frequency),
  and, if the learner found fewer pieces than asked, more [unusedK] slots at the end,
  so the file always has exactly --vocab_size lines (bert_config.json's vocab_size).
"""

import collections
import time
from typing import Counter, Dict, Iterable, List, Optional, Sequence

from absl import logging

from bert_tf import io
from bert_tf import tokenization
from bert_tf.data import corpus

SPECIAL_TOKENS = ("[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The released vocabs put 99 unused slots between [PAD] and [UNK].
UNUSED_BEFORE_UNK = 99


def reserved_tokens(num_unused: int) -> List[str]:
  """[PAD], unused slots and the special tokens, at the ids the released vocabs use."""
  before = min(num_unused, UNUSED_BEFORE_UNK)
  tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(before)]
  tokens += list(SPECIAL_TOKENS)
  tokens += [f"[unused{i}]" for i in range(before, num_unused)]
  return tokens


def count_words(paths: Sequence[str], do_lower_case: bool, errors: str = "strict",
                log_every_s: float = 10.0) -> Counter:
  """Counts the words the BERT basic tokenizer produces over the files' lines.

  Args:
    paths: input files (plain text, any tf.io.gfile path).
    do_lower_case: as for the tokenizer that will use the vocab.
    errors: how invalid UTF-8 is handled (see bert_tf.data.corpus.iter_lines).
    log_every_s: seconds between progress lines.

  Returns:
    word -> count.
  """
  basic = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  counts: Counter = collections.Counter()
  total = max(1, corpus.total_size(paths))
  done = 0
  start = last_log = time.time()
  report = corpus.ReadReport()
  for path in paths:
    for line in corpus.iter_lines(path, errors, report):
      counts.update(basic.tokenize(line))
      done = report.bytes
      now = time.time()
      if now - last_log >= log_every_s:
        last_log = now
        rate = done / (now - start)
        logging.info("counting words: %.1f/%.1f MB (%.2f MB/s, ETA %.0f s), %d distinct",
                     done / 1e6, total / 1e6, rate / 1e6, (total - done) / rate, len(counts))
  logging.info("counted %d words, %d distinct, in %.1f s", sum(counts.values()), len(counts),
               time.time() - start)
  corpus.warn_read_problems(report)
  return counts


def learn_pieces(word_counts: Dict[str, int], target_size: int, max_unique_chars: int = 1000,
                 max_token_length: int = 50, max_input_words: int = 5_000_000,
                 slack_ratio: float = 0.05, num_iterations: int = 4) -> List[str]:
  """Learns up to target_size word pieces with tensorflow-text's threshold search.

  Words are ordered by (count descending, word) before learning, which makes the result
  independent of the order the corpus was read in.

  Args:
    word_counts: word -> count.
    target_size: maximum number of pieces (the vocab size minus the reserved tokens).
    max_unique_chars: only the most frequent characters become pieces; words with other
      characters are not learned from (they tokenize to [UNK]).
    max_token_length: longer words are not learned from.
    max_input_words: only the most frequent words are learned from.
    slack_ratio: accept a piece count within this fraction below target_size.
    num_iterations: refinement passes per threshold.

  Returns:
    The pieces, characters first, continuation pieces prefixed "##".
  """
  if not word_counts:
    raise ValueError("the corpus has no words to learn a vocabulary from")
  ordered = sorted(word_counts.items(), key=lambda kv: (-kv[1], kv[0]))
  # tensorflow-text's learner imports TensorFlow: only when a vocab is learned.
  from tensorflow_text.tools.wordpiece_vocab import wordpiece_tokenizer_learner_lib as learner_lib  # pylint: disable=g-import-not-at-top,line-too-long
  params = learner_lib.Params(
      upper_thresh=None, lower_thresh=1, num_iterations=num_iterations,
      max_input_tokens=max_input_words, max_token_length=max_token_length,
      max_unique_chars=max_unique_chars, vocab_size=target_size, slack_ratio=slack_ratio,
      include_joiner_token=True, joiner="##", reserved_tokens=[])
  words = learner_lib.get_input_words(ordered, [], max_token_length)
  allowed = learner_lib.get_allowed_chars(words, max_unique_chars)
  words = learner_lib.filter_input_words(words, allowed, max_input_words)
  if not words:
    raise ValueError("no word survives the length and alphabet limits; raise "
                     "--max_token_length or --max_unique_chars")

  # Binary search on the minimum piece frequency: a lower threshold admits more pieces.
  lower, upper = 1, max(count for _, count in words)
  best: Optional[List[str]] = None  # the largest result that fits
  over: Optional[List[str]] = None  # the smallest result that does not
  step = 0
  while True:
    step += 1
    threshold = (lower + upper) // 2
    started = time.time()
    pieces = learner_lib.learn_with_thresh(words, threshold, params)
    logging.info("learning: try %d, min frequency %d -> %d pieces (target %d) in %.1f s",
                 step, threshold, len(pieces), target_size, time.time() - started)
    fits = len(pieces) <= target_size
    if fits and (best is None or len(pieces) > len(best)):
      best = pieces
    if not fits and (over is None or len(pieces) < len(over)):
      over = pieces
    if fits and target_size - len(pieces) <= slack_ratio * target_size:
      break
    if lower >= upper or threshold <= 1:
      break
    if fits:
      upper = threshold - 1
    else:
      lower = threshold + 1
  if best is None or (over is not None and target_size - len(best) > slack_ratio * target_size):
    # Thresholds are integers, and at low counts one step can jump far past the target (on
    # small corpora, frequency 2 -> 5,000 pieces, frequency 1 -> 7,300). Then the overshooting
    # result, cut to size, is closer. The cut keeps every character and "##"+character (so
    # every word still tokenizes) and drops the rarest longer pieces (the list is by frequency).
    logging.info("learning: cutting the %d-piece result to %d", len(over), target_size)
    is_char = lambda p: len(p) == 1 or (len(p) == 3 and p.startswith("##"))
    num_chars = sum(map(is_char, over))
    if num_chars <= target_size:
      longer = [p for p in over if not is_char(p)][:target_size - num_chars]
      keep = set(longer)
      best = [p for p in over if is_char(p) or p in keep]
    else:
      best = over[:target_size]
  return best


def build_vocab(word_counts: Dict[str, int], vocab_size: int, num_unused: int = 994,
                **learn_kwargs) -> List[str]:
  """The full vocab list: reserved layout, learned pieces, then unused top-up slots."""
  reserved = reserved_tokens(num_unused)
  if vocab_size <= len(reserved):
    raise ValueError(f"--vocab_size={vocab_size} leaves no room for learned pieces after "
                     f"{len(reserved)} reserved tokens; raise it or lower --num_unused")
  reserved_set = set(reserved)
  pieces = [p for p in learn_pieces(word_counts, vocab_size - len(reserved), **learn_kwargs)
            if p not in reserved_set]
  vocab = reserved + pieces[:vocab_size - len(reserved)]
  next_unused = num_unused
  while len(vocab) < vocab_size:
    vocab.append(f"[unused{next_unused}]")
    next_unused += 1
  return vocab


def unknown_rate(word_counts: Dict[str, int], vocab: Iterable[str]) -> Dict[str, float]:
  """Tokenizes every counted word with the vocab: [UNK] share and pieces per word."""
  wordpiece = tokenization.WordpieceTokenizer(
      vocab=collections.OrderedDict((t, i) for i, t in enumerate(vocab)))
  words = pieces = unknown = 0
  for word, count in word_counts.items():
    tokens = wordpiece.tokenize(word)
    words += count
    pieces += count * len(tokens)
    unknown += count * tokens.count("[UNK]")
  return {"words": words, "wordpieces": pieces,
          "unk_fraction": unknown / max(1, pieces),
          "wordpieces_per_word": pieces / max(1, words)}


def write_vocab(vocab: Sequence[str], path: str) -> None:
  """Writes one token per line, atomically (temporary name, then rename)."""
  io.write_text(path, "".join(f"{token}\n" for token in vocab))

"""Documents -> pretraining instances: NSP pairing, truncation and masked-LM selection.

This is the original release's algorithm (create_pretraining_data.py:
create_training_instances, create_instances_from_document, create_masked_lm_predictions and
truncate_seq_pair), reproduced
call for call: with the same documents, options and `random.Random(seed)` it makes the same
instances in the same order. It works on token ids rather than token strings, and on index ranges
rather than list deletions, which is where most of its speed over the original comes from; the
random draws, and therefore the output, are unchanged. Two options leave the original's
behaviour: `exact_draws=False` (the default mode's: masked positions sampled lazily, the same
distribution with fewer draws) and `word_tags` (whole-word masking over pre-segmented words,
see tag_words).

Documents are lists of segments (one per input line); a segment is a list of token ids.
The random generator is always passed in; nothing here reads flags or global state.
"""

import collections
import dataclasses
import random
from typing import Callable, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from bert_tf import record_schema
from bert_tf.data.corpus import LongLineCallback, ReadReport, iter_lines, iter_piece_lines

CLS_TOKEN = "[CLS]"
SEP_TOKEN = "[SEP]"
MASK_TOKEN = "[MASK]"

Document = List[List[int]]

# One pretraining example before padding. input_ids is `[CLS] A [SEP] B [SEP]`; the first
# num_segment_a tokens (len(A) + 2) have segment id 0. masked_lm_positions ascend;
# masked_lm_ids are the original ids there (input_ids already hold the replacements).
TrainingInstance = collections.namedtuple(
    "TrainingInstance",
    ["input_ids", "num_segment_a", "masked_lm_positions", "masked_lm_ids", "is_random_next"])


class InstanceOptionsError(ValueError):
  """Options that cannot produce valid instances; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class InstanceOptions:
  """How instances are made; field names and defaults are the original's flags."""

  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  dupe_factor: int = 10
  do_whole_word_mask: bool = False
  # Segments carry word tags (tag_words): group whole words by them, strip them from the ids.
  word_tags: bool = False
  # True: the original's random draws (every candidate shuffled before the first few are
  # taken). False: only the draws the chosen positions need (a partial Fisher-Yates shuffle);
  # the same distribution of masks, different records, and several times fewer draws.
  exact_draws: bool = True

  def __post_init__(self):
    problems = []
    low, high = record_schema.MIN_SEQ_LENGTH, record_schema.MAX_SEQ_LENGTH_LIMIT
    if not isinstance(self.max_seq_length, int) or not low <= self.max_seq_length <= high:
      # The original fails below MIN_SEQ_LENGTH (randint(2, max_seq_length - 3) and its
      # truncation asserts).
      problems.append(f"--max_seq_length must be between {low} and {high}, got "
                      f"{self.max_seq_length}")
    if not isinstance(self.max_predictions_per_seq, int) or self.max_predictions_per_seq < 1:
      problems.append(
          f"--max_predictions_per_seq must be a positive integer, got "
          f"{self.max_predictions_per_seq}")
    elif (isinstance(self.max_seq_length, int)
          and self.max_predictions_per_seq > self.max_seq_length - 3):
      problems.append(
          f"--max_predictions_per_seq={self.max_predictions_per_seq} is larger than possible: "
          f"at most max_seq_length - 3 = {self.max_seq_length - 3} tokens can be masked")
    if not 0.0 < self.masked_lm_prob <= 1.0:
      problems.append(f"--masked_lm_prob must be in (0, 1], got {self.masked_lm_prob}")
    if not 0.0 <= self.short_seq_prob <= 1.0:
      problems.append(f"--short_seq_prob must be in [0, 1], got {self.short_seq_prob}")
    if self.word_tags and not self.do_whole_word_mask:
      problems.append("--segmented_input only changes whole-word masking: it needs "
                      "--do_whole_word_mask")
    if not isinstance(self.dupe_factor, int) or self.dupe_factor < 1:
      problems.append(f"--dupe_factor must be a positive integer, got {self.dupe_factor}")
    if problems:
      raise InstanceOptionsError("; ".join(problems))

  @property
  def max_num_tokens(self) -> int:
    """Room for A and B: the sequence minus [CLS] and two [SEP]."""
    return self.max_seq_length - 3


class VocabTables:
  """What instance creation needs from the vocabulary, indexed by token id.

  Args:
    vocab: token -> id in file order (the tokenizer's `vocab`).
    source: named in error messages (e.g. the vocab file).

  Raises:
    ValueError: the vocabulary lacks [CLS], [SEP] or [MASK].
  """

  def __init__(self, vocab: Mapping[str, int], source: str = "vocab"):
    missing = [t for t in (CLS_TOKEN, SEP_TOKEN, MASK_TOKEN) if t not in vocab]
    if missing:
      raise ValueError(f"{source}: the vocabulary lacks the special token(s) "
                       f"{', '.join(missing)} that pretraining data needs")
    self.cls_id = vocab[CLS_TOKEN]
    self.sep_id = vocab[SEP_TOKEN]
    self.mask_id = vocab[MASK_TOKEN]
    # The original draws a random replacement as vocab_words[randint(0, len - 1)] over the
    # vocab's keys in file order (special and [unused] tokens included) and looks its id up;
    # dict values in key order are exactly those ids.
    self.replacement_ids = list(vocab.values())
    size = max(self.replacement_ids) + 1
    self.size = size
    # Whole-word masking joins a WordPiece continuation ("##...") to the previous group. The
    # upper half marks word-tagged ids (see tag_words): always a continuation.
    continuation = bytearray(size) + b"\x01" * size
    for token, token_id in vocab.items():
      if token.startswith("##"):
        continuation[token_id] = 1
    # A token id may appear under two strings only if the vocab file repeats a line; the last
    # string wins, as in the original's id -> token map.
    self.is_continuation = continuation


def tag_words(tokenize_to_ids: Callable[[str], List[int]],
              vocab_size: int) -> Callable[[str], List[int]]:
  """Wraps a tokenizer for input already segmented into words separated by spaces.

  Each space-separated word is tokenized on its own (the ids are those of the whole line:
  BERT's tokenizer never joins text across a space), and every id after the first of a word is
  tagged by adding vocab_size. Whole-word masking then groups all tokens of a word, e.g. the
  characters of a Chinese word, which the tokenizer otherwise splits into words of one
  character (its "##" test never fires for them). create_masked_lm_predictions removes the
  tags; an id is never tagged in a record.

  Args:
    tokenize_to_ids: text -> ids.
    vocab_size: VocabTables.size.

  Returns:
    line -> tagged ids.
  """
  def tokenize(line: str) -> List[int]:
    ids = []
    for word in line.split(" "):
      if word:
        word_ids = tokenize_to_ids(word)
        if word_ids:
          ids.append(word_ids[0])
          ids.extend(i + vocab_size for i in word_ids[1:])
    return ids
  return tokenize


# === Random draws ===


def shuffle(items: list, rng: random.Random) -> None:
  """In place; exactly `rng.shuffle(items)` for a `random.Random`, about twice as fast.

  CPython's shuffle swaps item i with `_randbelow(i + 1)` for i from the end down to 1, and
  `_randbelow(n)` draws `getrandbits(n.bit_length())` until the value is below n. Inlining that
  saves a Python call per item, which matters: masking shuffles every position of every instance.
  """
  if type(rng) is not random.Random:  # pylint: disable=unidiomatic-typecheck
    rng.shuffle(items)  # a subclass may draw differently
    return
  getrandbits = rng.getrandbits
  i = len(items) - 1
  while i > 0:
    # All i with the same (i + 1).bit_length() form one run: no bit_length() call per item.
    k = (i + 1).bit_length()
    lowest = max((1 << (k - 1)) - 1, 1)
    for i in range(i, lowest - 1, -1):
      j = getrandbits(k)
      while j > i:
        j = getrandbits(k)
      items[i], items[j] = items[j], items[i]
    i = lowest - 1


def num_to_predict(num_tokens: int, masked_lm_prob: float, max_predictions_per_seq: int) -> int:
  """How many tokens an instance of num_tokens tokens masks (Python 3 rounds half to even)."""
  return min(max_predictions_per_seq, max(1, int(round(num_tokens * masked_lm_prob))))


def sample_in_place(items: list, count: int, rng: random.Random) -> None:
  """Moves a uniformly random ordered sample of min(count, len) items to the front of items.

  A partial Fisher-Yates shuffle: items[:count] is distributed exactly like the first count
  items after a full shuffle, with count draws instead of len(items) - 1. Not the original's
  draws (see InstanceOptions.exact_draws).
  """
  n = len(items)
  getrandbits = rng.getrandbits
  for i in range(min(count, n - 1)):
    span = n - i
    k = span.bit_length()
    j = getrandbits(k)
    while j >= span:
      j = getrandbits(k)
    j += i
    items[i], items[j] = items[j], items[i]


# === Masking ===


def create_masked_lm_predictions(
    input_ids: List[int], options: InstanceOptions, vocab: VocabTables,
    rng: random.Random) -> Tuple[List[int], List[int], List[int]]:
  """Chooses and replaces the masked-LM targets of one instance (the original's draws).

  Every position except [CLS] and [SEP] is a candidate group of one; with whole-word masking a
  "##" token joins the group before it. That test looks at the previous *candidate*, so after
  truncation a "##" token at the start of B joins the last word of A across [SEP] (the
  original's quirk, kept). For Chinese the original's tokenizer never emits "##" pieces for CJK
  characters (each is a word of its own), so whole-word masking changes nothing there.

  Args:
    input_ids: `[CLS] A [SEP] B [SEP]` ids; not modified.
    options: masked_lm_prob, max_predictions_per_seq, do_whole_word_mask.
    vocab: special ids and replacement table.
    rng: the generator; draws come in the order of the original's
      create_masked_lm_predictions (shuffle of the candidates, then per masked token).

  Returns:
    (output_ids, masked_lm_positions ascending, masked_lm_ids at those positions).
  """
  cls_id, sep_id = vocab.cls_id, vocab.sep_id
  target = num_to_predict(len(input_ids), options.masked_lm_prob,
                          options.max_predictions_per_seq)
  if options.do_whole_word_mask:
    is_continuation = vocab.is_continuation
    size = vocab.size
    groups = []
    for i, token_id in enumerate(input_ids):
      if token_id == cls_id or token_id == sep_id:
        continue
      # A word-tagged token joins only a group that ends right before it (never across [SEP],
      # unlike a "##" piece in the original).
      if groups and is_continuation[token_id] and (token_id < size or groups[-1][-1] == i - 1):
        groups[-1].append(i)
      else:
        groups.append([i])
    if options.word_tags:
      input_ids = [i - size if i >= size else i for i in input_ids]
    chosen = []
    if options.exact_draws:
      shuffle(groups, rng)
      for group in groups:
        if len(chosen) >= target:
          break
        # Groups never overlap, so the original's "already covered" test never fires; only a
        # group that would overshoot the target is skipped.
        if len(chosen) + len(group) > target:
          continue
        chosen.extend(group)
    else:
      # The same walk over a shuffle drawn lazily: group i is fixed only when it is reached.
      n = len(groups)
      getrandbits = rng.getrandbits
      for i in range(n):
        if len(chosen) >= target:
          break
        span = n - i
        if span > 1:
          k = span.bit_length()
          j = getrandbits(k)
          while j >= span:
            j = getrandbits(k)
          groups[i], groups[i + j] = groups[i + j], groups[i]
        group = groups[i]
        if len(chosen) + len(group) <= target:
          chosen.extend(group)
  else:
    # Groups of one: after the shuffle the first `target` candidates are the chosen ones.
    n = len(input_ids)
    if (input_ids[0] == cls_id and input_ids[-1] == sep_id and input_ids.count(cls_id) == 1
        and input_ids.count(sep_id) == 2):
      # The usual layout, found with C-speed scans: every position but the three specials.
      middle = input_ids.index(sep_id)
      candidates = list(range(1, middle))
      candidates.extend(range(middle + 1, n - 1))
    else:
      candidates = [i for i, token_id in enumerate(input_ids)
                    if token_id != cls_id and token_id != sep_id]
    if options.exact_draws:
      shuffle(candidates, rng)
    else:
      sample_in_place(candidates, target, rng)
    chosen = candidates[:target]

  output_ids = list(input_ids)
  draw = rng.random
  mask_id = vocab.mask_id
  replacement_ids = vocab.replacement_ids
  num_replacements = len(replacement_ids)
  for position in chosen:
    # 80% [MASK], 10% unchanged, 10% a random vocabulary entry; drawn in the walk's order.
    if draw() < 0.8:
      output_ids[position] = mask_id
    elif draw() < 0.5:
      pass
    else:
      output_ids[position] = replacement_ids[rng.randint(0, num_replacements - 1)]
  positions = sorted(chosen)
  return output_ids, positions, [input_ids[p] for p in positions]


# === Pairing and truncation ===


def create_instances_from_document(
    all_documents: Sequence[Document], document_index: int, options: InstanceOptions,
    vocab: VocabTables, rng: random.Random) -> List[TrainingInstance]:
  """Cuts one document into instances (A, B) with NSP labels, as the original does.

  Segments are gathered into a chunk until the chunk reaches a target length (usually
  max_seq_length - 3; with probability short_seq_prob a random shorter one, so the model also
  sees short sequences). A is a random prefix of the chunk's segments; B is the rest, or (half
  the time, and always for a one-segment chunk) text from a random other document, in which
  case the chunk's unused segments are put back for the next chunk.
  """
  document = all_documents[document_index]
  max_num_tokens = options.max_num_tokens
  target_length = max_num_tokens
  if rng.random() < options.short_seq_prob:
    target_length = rng.randint(2, max_num_tokens)

  instances = []
  chunk = []
  chunk_length = 0
  i = 0
  while i < len(document):
    segment = document[i]
    chunk.append(segment)
    chunk_length += len(segment)
    if i == len(document) - 1 or chunk_length >= target_length:
      a_end = 1
      if len(chunk) >= 2:
        a_end = rng.randint(1, len(chunk) - 1)
      tokens_a = []
      for j in range(a_end):
        tokens_a.extend(chunk[j])

      tokens_b = []
      if len(chunk) == 1 or rng.random() < 0.5:
        is_random_next = True
        target_b_length = target_length - len(tokens_a)
        # Ten tries to find another document; a one-document corpus ends up pairing with itself.
        for _ in range(10):
          random_index = rng.randint(0, len(all_documents) - 1)
          if random_index != document_index:
            break
        random_document = all_documents[random_index]
        start = rng.randint(0, len(random_document) - 1)
        for j in range(start, len(random_document)):
          tokens_b.extend(random_document[j])
          if len(tokens_b) >= target_b_length:
            break
        # The chunk's segments after A were not used: walk them again.
        i -= len(chunk) - a_end
      else:
        is_random_next = False
        for j in range(a_end, len(chunk)):
          tokens_b.extend(chunk[j])

      a_start, a_stop, b_start, b_stop = truncate_seq_pair(
          len(tokens_a), len(tokens_b), max_num_tokens, rng)
      tokens_a = tokens_a[a_start:a_stop]
      input_ids = [vocab.cls_id] + tokens_a + [vocab.sep_id]
      num_segment_a = len(input_ids)
      input_ids += tokens_b[b_start:b_stop]
      input_ids.append(vocab.sep_id)

      output_ids, positions, labels = create_masked_lm_predictions(input_ids, options, vocab, rng)
      instances.append(TrainingInstance(output_ids, num_segment_a, positions, labels,
                                        is_random_next))
      chunk = []
      chunk_length = 0
    i += 1
  return instances


def truncate_seq_pair(len_a: int, len_b: int, max_num_tokens: int,
                      rng: random.Random) -> Tuple[int, int, int, int]:
  """Trims A and B to max_num_tokens together; returns (a_start, a_stop, b_start, b_stop).

  One token at a time from the longer side (B on a tie), from its front or its back at random
  (one draw per token): trimming only the end would bias the model towards text that ends
  sequences.
  """
  a_start, a_stop, b_start, b_stop = 0, len_a, 0, len_b
  draw = rng.random
  while (a_stop - a_start) + (b_stop - b_start) > max_num_tokens:
    if a_stop - a_start > b_stop - b_start:
      if draw() < 0.5:
        a_start += 1
      else:
        a_stop -= 1
    else:
      if draw() < 0.5:
        b_start += 1
      else:
        b_stop -= 1
  return a_start, a_stop, b_start, b_stop


# === The whole corpus ===


def create_training_instances(
    documents: List[Document], options: InstanceOptions, vocab: VocabTables,
    rng: random.Random, transform: Optional[Callable[[TrainingInstance], object]] = None,
    progress: Optional[Callable[[int, int, int], None]] = None,
    progress_every: int = 1000) -> list:
  """The original's whole pipeline after reading: shuffle documents, dupe_factor passes, shuffle.

  Args:
    documents: non-empty documents; shuffled in place (the original's first draw).
    options: instance options.
    vocab: vocabulary tables.
    rng: the generator, seeded once by the caller.
    transform: applied to each instance as it is made (e.g. serialise it, which keeps memory at
      a few hundred bytes per instance); the final shuffle moves the transformed values.
    progress: called as progress(documents_done, documents_total, instances_made) every
      progress_every documents (documents counted over all passes).
    progress_every: see progress.

  Returns:
    The (transformed) instances in the original's final order.
  """
  shuffle(documents, rng)
  results = []
  total = len(documents) * options.dupe_factor
  done = 0
  for _ in range(options.dupe_factor):
    for document_index in range(len(documents)):
      for instance in create_instances_from_document(documents, document_index, options, vocab,
                                                     rng):
        results.append(transform(instance) if transform else instance)
      done += 1
      if progress is not None and done % progress_every == 0:
        progress(done, total, len(results))
  shuffle(results, rng)
  if progress is not None:
    progress(done, total, len(results))
  return results


# === Reading documents ===


def read_documents(input_files: Iterable[str], tokenize_to_ids: Callable[[str], List[int]],
                   errors: str = "strict", report: Optional[ReadReport] = None,
                   progress: Optional[Callable[[str, ReadReport], None]] = None,
                   max_line_bytes: int = 0, on_long_line: Optional[LongLineCallback] = None
                   ) -> Tuple[List[Document], ReadReport]:
  """Reads one-sentence-per-line text with blank lines between documents.

  The original's create_pretraining_data.py:create_training_instances reading loop.

  As in the original, documents run on across file boundaries (a file that does not end with a
  blank line continues into the next file's first document), lines are stripped, a line is kept
  only if it yields tokens, and empty documents are dropped.

  Args:
    input_files: paths, read in this order.
    tokenize_to_ids: text -> token ids (or tokens: anything the caller's vocab tables match).
    errors: invalid UTF-8 handling, see iter_lines.
    report: updated in place if given.
    progress: called as progress(path, report) after each file.
    max_line_bytes, on_long_line: see corpus.iter_lines.

  Returns:
    (documents, report).
  """
  report = report or ReadReport()
  documents = [[]]
  for path in input_files:
    if progress is not None and report.files:
      progress(path, report)
    for line in iter_lines(path, errors, report, max_line_bytes, on_long_line):
      line = line.strip()
      if not line:
        if documents[-1]:
          documents.append([])
        continue
      ids = tokenize_to_ids(line)
      if ids:
        documents[-1].append(ids)
        report.segments += 1
        report.tokens += len(ids)
  documents = [d for d in documents if d]
  report.documents = len(documents)
  if progress is not None:
    progress("", report)
  return documents, report


# === Default mode: a block plan ===
#
# The default mode does not hold the corpus in memory: the text is cut into blocks of whole
# documents (about block_bytes each), and each block is turned into instances on its own, with
# the algorithm above: its documents shuffled, dupe_factor passes, random-next segments drawn
# from another document of the same block, its instances shuffled.
#
# The plan is made up front from the file sizes alone (no pass over the text): the input files,
# taken as one stream in order, are cut into windows of about window_blocks * block_bytes
# bytes, each window a list of byte ranges (pieces) of one or more files. A window is read on
# its own (corpus.iter_piece_lines: a range owns the documents that begin in it), its documents
# are shuffled with a generator seeded from (random_seed, window index) and cut into blocks;
# each block's generator is seeded from (random_seed, window index, block index). So any worker
# can read any window, in any order, on any machine: the local mode (one reader, a pool of
# block workers) and the Beam pipeline (windows read in parallel) make the same blocks, hence
# the same records, whatever the number of workers.
#
# Documents end at blank lines and at the end of each file (unlike read_documents, where a
# file without a final blank line runs on into the next).


# Random-next partners come from the same block: a block has at least this many documents
# (when the window does), however large they are.
MIN_BLOCK_DOCUMENTS = 8
WINDOW_BLOCKS = 64

# One range of one input file: (file index, start byte, end byte).
Piece = Tuple[int, int, int]


def block_rng(random_seed: int, window_index: int, block_index: int) -> random.Random:
  """The generator of one block; a str seed is hashed with SHA-512, stable across runs."""
  return random.Random(f"bert_tf-block:{random_seed}:{window_index}:{block_index}")


def window_rng(random_seed: int, window_index: int) -> random.Random:
  """The generator that shuffles one window's documents."""
  return random.Random(f"bert_tf-window:{random_seed}:{window_index}")


def plan_windows(file_sizes: Sequence[int], window_bytes: int) -> List[List[Piece]]:
  """Cuts the files (one stream, in order) into windows of about window_bytes.

  The number of windows is the stream's size over window_bytes, rounded (at least one), and
  the windows are equal slices of the stream: none is much smaller than the others, so every
  window has documents enough to pair. Empty files have no piece.

  Args:
    file_sizes: the size in bytes of each input file, in input order.
    window_bytes: about how many bytes per window (> 0).

  Returns:
    For each window, its pieces (file index, start, end) in input order.
  """
  total = sum(file_sizes)
  if total == 0:
    return []
  count = max(1, int(round(total / max(window_bytes, 1))))
  bounds = [total * k // count for k in range(count + 1)]
  windows = [[] for _ in range(count)]
  offset = 0
  window = 0
  for index, size in enumerate(file_sizes):
    start = 0
    while start < size:
      while bounds[window + 1] <= offset + start:
        window += 1
      stop = min(size, bounds[window + 1] - offset)
      windows[window].append((index, start, stop))
      start = stop
    offset += size
  return [w for w in windows if w]


def read_window(input_files: Sequence[str], pieces: Sequence[Piece], errors: str,
                report: ReadReport, max_line_bytes: int = 0,
                on_long_line: Optional[LongLineCallback] = None) -> List[List[str]]:
  """The documents (lists of stripped, non-empty lines) that a window's pieces own."""
  documents = []
  for file_index, start, end in pieces:
    document = []
    for line in iter_piece_lines(input_files[file_index], start, end, errors, report,
                                 max_line_bytes, on_long_line):
      line = line.strip()
      if line:
        document.append(line)
      elif document:
        documents.append(document)
        document = []
    if document:  # the end of a file (or of the piece's last document) ends a document
      documents.append(document)
  return documents


def cut_window(documents: List[List[str]], block_bytes: int, random_seed: int,
               window_index: int) -> List[List[List[str]]]:
  """Shuffles a window's documents (in place) and cuts them into blocks of about block_bytes.

  Blocks of consecutive documents would pair chapters only with their neighbours, which shifts
  the statistics measurably when document lengths vary along the corpus (the reference mode
  shuffles the whole corpus); hence the shuffle over a window of many blocks.
  """
  window_rng(random_seed, window_index).shuffle(documents)
  blocks, block, block_size = [], [], 0
  for document in documents:
    block.append(document)
    block_size += sum(map(len, document)) + len(document)
    if block_size >= block_bytes and len(block) >= MIN_BLOCK_DOCUMENTS:
      blocks.append(block)
      block, block_size = [], 0
  if block:
    # A small remainder joins the last block: too few documents to pair on their own.
    if blocks and (block_size < block_bytes // 2 or len(block) < MIN_BLOCK_DOCUMENTS):
      blocks[-1].extend(block)
    else:
      blocks.append(block)
  return blocks


def iter_text_blocks(input_files: Sequence[str], file_sizes: Sequence[int], block_bytes: int,
                     errors: str, report: ReadReport, random_seed: int = 0,
                     window_blocks: int = WINDOW_BLOCKS, max_line_bytes: int = 0,
                     on_long_line: Optional[LongLineCallback] = None
                     ) -> Iterator[Tuple[Tuple[int, int], List[List[str]], float]]:
  """Yields ((window index, block index), documents, input bytes) for the whole plan, in plan
  order; a block's input bytes are its window's, shared by the blocks' characters (for
  progress: the reader runs a window ahead of the blocks made from it).

  One reader's walk over plan_windows; memory holds one window of text.
  """
  plan = plan_windows(file_sizes, block_bytes * max(window_blocks, 1))
  for window_index, pieces in enumerate(plan):
    read_before = report.bytes
    documents = read_window(input_files, pieces, errors, report, max_line_bytes, on_long_line)
    per_char = (report.bytes - read_before) / max(
        1, sum(len(line) for document in documents for line in document))
    for block_index, block in enumerate(cut_window(documents, block_bytes, random_seed,
                                                   window_index)):
      size = per_char * sum(len(line) for document in block for line in document)
      yield (window_index, block_index), block, size

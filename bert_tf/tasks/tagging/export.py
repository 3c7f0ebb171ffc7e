"""run_ner's export: the fine-tuned tagger as a raw-text SavedModel in TF Serving's layout.

`export_tagger(model, config, settings, info, version)` writes
<output_dir>/export/ner/<version>/ with `bert_tf.tasks.tagging.serving_module.export_tagger_model`:
texts in; words, tags and entities with code point offsets out (serving_module's docstring).
"""

from typing import Any, Mapping, Optional

from absl import logging
import keras

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.tasks.tagging import head as tagging_head
from bert_tf.tasks.tagging import serving_module as tagger_module

MODEL_NAME = "ner"


def export_tagger(model: keras.Model, config: BertConfig, settings: Any,
                  info: Mapping[str, Any], version: Optional[int] = None,
                  export_dir: Optional[str] = None) -> str:
  """Exports the tagger to <output_dir>/export/ner/<version>/ (a float32 copy of `model`).

  Args:
    model: the trained tagger (any dtype policy).
    config: its BertConfig.
    settings: the run's NerSettings (vocab, casing, max_seq_length).
    info: the run's task info (its labels), written as assets/task_info.json.
    version: the version number (run_ner passes the global step); default the next one.
    export_dir: the model base directory; default <output_dir>/export.

  Returns:
    The version directory written.
  """
  labels = list(info["labels"])
  float_model = checkpoints.float32_copy(
      model, lambda: tagging_head.build_tagger_model(config, len(labels)))
  path = tagger_module.export_tagger_model(
      float_model, config, settings.vocab_file,
      export_dir or io.join(settings.output_dir, exporting.EXPORT_DIR), labels,
      do_lower_case=settings.do_lower_case, seq_length=settings.max_seq_length,
      version=version, model_name=MODEL_NAME, task_info=info,
      length_buckets=settings.length_buckets)
  logging.info("Exported the tagger for TF Serving to %s", path)
  return path


EXPORTER = exporting.Exporter(MODEL_NAME, export_tagger)

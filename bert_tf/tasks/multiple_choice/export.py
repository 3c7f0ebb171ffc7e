"""run_multiple_choice's export: the fine-tuned model as a raw-text SavedModel for TF Serving.

`export_multiple_choice(model, config, settings, info, version)` writes
<output_dir>/export/multiple_choice/<version>/ with
`serving_module.export_multiple_choice_model`: context [B] and choices
[B, C] in; probabilities [B, C] and the chosen index out.
"""

from typing import Any, Mapping, Optional

from absl import logging
import keras

from bert_tf import io
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model import exporting
from bert_tf.tasks.multiple_choice import head as mc_head
from bert_tf.tasks.multiple_choice import serving_module

MODEL_NAME = "multiple_choice"


def export_multiple_choice(model: keras.Model, config: BertConfig, settings: Any,
                           info: Mapping[str, Any], version: Optional[int] = None,
                           export_dir: Optional[str] = None) -> str:
  """Exports the model to <output_dir>/export/multiple_choice/<version>/ (a float32 copy).

  Args:
    model: the trained multiple-choice model (any dtype policy).
    config: its BertConfig.
    settings: the run's MultipleChoiceSettings (vocab, casing, max_seq_length, length buckets).
    info: the run's task info, written as assets/task_info.json.
    version: the version number (the run passes the global step); default the next one.
    export_dir: the model base directory; default <output_dir>/export.

  Returns:
    The version directory written.
  """
  float_model = checkpoints.float32_copy(
      model, lambda: mc_head.build_multiple_choice_model(config))
  path = serving_module.export_multiple_choice_model(
      float_model, config, settings.vocab_file,
      export_dir or io.join(settings.output_dir, exporting.EXPORT_DIR),
      do_lower_case=settings.do_lower_case, seq_length=settings.max_seq_length,
      version=version, model_name=MODEL_NAME, task_info=info,
      length_buckets=settings.length_buckets)
  logging.info("Exported the multiple-choice model for TF Serving to %s", path)
  return path


EXPORTER = exporting.Exporter(MODEL_NAME, export_multiple_choice)

"""The optional measured backend: a step's kernel work taken from the kernels NVIDIA measured
with vLLM (``aiconfigurator-core``, ``pip install 'cgdispatch[aic]'``, Python >= 3.11) where
it has data for the model and GPU, instead of the fitted formulas.

:class:`MeasuredKernelPricer` keeps everything the measurements do not hold from the built-in
model: padding (a graph runs its padded size), launches, graph pieces, host time. A step is
``model(step, padded) - model(device work, unpadded) + measured(device work, unpadded)``: the
built-in model's step with its unpadded kernel work replaced by the measured sum
(:func:`~cgdispatch.estimate.aic_steps.measured_step_breakdown`). The built-in model stays the
default (``device_cost_model(..., kernels="model")``); ``kernels="aic"`` selects this one, and
the cost model's ``source`` says so.
"""

from __future__ import annotations

from ..core import cache
from ..core.modes import CUDAGraphMode
from ..core.step_content import StepContent
from .step_cost import PricedModel, StepPricer

__all__ = ["MeasuredKernelPricer", "KERNEL_SOURCES", "check_measured_backend"]

# where a cost model's kernel times come from
KERNEL_SOURCES = ("model", "aic")


def check_measured_backend(model_name: str, device: str) -> None:
    """ValueError naming what is missing for measured kernels of ``model_name`` on
    ``device``: the package (or its data folder), the GPU's tables, the model's config."""
    from .aic_data import aic_data_dir, gpu_folder
    from .aic_steps import aic_model

    aic_data_dir()
    gpu_folder(device)
    aic_model(model_name)  # a published config the measured tables can be read for


class MeasuredKernelPricer(StepPricer):
    """A :class:`~cgdispatch.estimate.step_cost.StepPricer` whose kernel work is measured."""

    def __init__(self, cost_model: PricedModel, device: str) -> None:
        super().__init__(cost_model)
        self.device = device
        tp = self.shape.tensor_parallel_size
        dtype = "fp8" if cost_model.weight_dtype == "fp8" else "bfloat16"
        kv_dtype = "fp8" if self.shape.kv_dtype_bytes == 1 else "bfloat16"

        @cache.local_memo(maxsize=1 << 16)
        def measured_ms(content: StepContent) -> float:
            from .aic_steps import measured_step_breakdown

            decodes = ()
            if content.decode_reqs:
                mean = max(1, round(content.decode_kv_tokens / content.decode_reqs))
                decodes = (mean,) * content.decode_reqs
            return measured_step_breakdown(
                cost_model.model_name,
                device,
                decode_contexts=decodes,
                prompt_chunks=content.chunks,
                tensor_parallel_size=tp,
                dtype=dtype,
                kv_dtype=kv_dtype,
            ).total_ms

        self.measured_ms = measured_ms

    def step_ms(self, content: StepContent, mode: CUDAGraphMode, padded: int) -> float:
        model = super().step_ms(content, mode, padded)
        return model - self.device_ms(content) + self.measured_ms(content)

"""Test support, on PYTHONPATH only where a test puts it: accelerate applies FSDP to GPU process groups only,
so with FORCE_CPU_FSDP=1 this makes it apply FSDP to a CPU (gloo) group too. Every other part of a sharded
trl job (our launch command, TRL, accelerate's FSDP2 wrapping, sharded checkpoints) runs as on GPUs."""

import os

if os.environ.get("FORCE_CPU_FSDP") == "1":
    import accelerate.state as state
    from accelerate.utils import DistributedType

    _init = state.AcceleratorState.__init__

    def _init_with_cpu_fsdp(self, *args, fsdp_plugin=None, **kwargs):
        _init(self, *args, fsdp_plugin=fsdp_plugin, **kwargs)
        if fsdp_plugin is not None and self.distributed_type in (DistributedType.MULTI_CPU, DistributedType.NO):
            self.distributed_type = DistributedType.FSDP
            if self._mixed_precision != "no":  # as accelerate does for GPU groups: FSDP2's MixedPrecisionPolicy
                fsdp_plugin.set_mixed_precision(self._mixed_precision)
            self.fsdp_plugin = fsdp_plugin
            # Later AcceleratorState() calls copy the process state back in: it must say FSDP too.
            state.PartialState._shared_state["distributed_type"] = DistributedType.FSDP

    state.AcceleratorState.__init__ = _init_with_cpu_fsdp

"""CUDA IPC staging: the target's GPU ring, mapped in place by a drafter on the same GPU.

Target: a raw ``cudaMalloc`` (not cupy's pool, whose blocks cannot be exported safely), its IPC
memory handle, and an interprocess event recorded on the writing stream after each step's copy.
Drafter: opens both handles once at Attach; before reading a step it makes its own stream wait on
the event (the GPU waits, not the host). Tensors cross between cupy and torch through DLPack.
The descriptor carries the GPU's UUID: a drafter that does not see that GPU refuses to attach.

cupy is imported, and CUDA touched, only when this transport is used (never at import time).
"""

from __future__ import annotations

import torch

from tandem_core.transport.base import DTYPE_NAMES, DTYPES, BufferDescriptor, RowRange, StagingError, check_range

HANDLE_BYTES = 64  # cudaIpcMemHandle_t and cudaIpcEventHandle_t are 64 opaque bytes each


def _cupy():
    try:
        import cupy
    except ImportError as err:
        raise StagingError("the cuda_ipc transport needs cupy: pip install 'tandem-mtp[gpu]'") from err
    return cupy


def device_uuid(cp, index: int) -> str:
    uuid = cp.cuda.runtime.getDeviceProperties(index).get("uuid", b"")
    return uuid.hex() if isinstance(uuid, bytes) else str(uuid)


def split_handle(desc: BufferDescriptor) -> tuple[bytes, bytes]:
    """(memory handle, event handle), refusing anything that is not exactly two 64-byte handles."""
    if desc.kind != "cuda_ipc" or len(desc.ipc_handle) != 2 * HANDLE_BYTES:
        raise StagingError(f"cuda_ipc descriptor needs {2 * HANDLE_BYTES} handle bytes, got {len(desc.ipc_handle)}")
    if not desc.device_uuid:
        raise StagingError("cuda_ipc descriptor lacks the GPU UUID")
    return desc.ipc_handle[:HANDLE_BYTES], desc.ipc_handle[HANDLE_BYTES:]


def find_device(cp, uuid: str) -> int:
    """Index of the local GPU with this UUID, or a StagingError naming what is visible."""
    seen = [device_uuid(cp, i) for i in range(cp.cuda.runtime.getDeviceCount())]
    if uuid not in seen:
        raise StagingError(f"staging buffer lives on GPU {uuid}; this drafter sees {seen or 'no GPU'}")
    return seen.index(uuid)


def _as_tensor(cp, ptr: int, nbytes: int, owner, desc: BufferDescriptor, device: int) -> torch.Tensor:
    memory = cp.cuda.UnownedMemory(ptr, nbytes, owner, device_id=device)
    array = cp.ndarray((nbytes,), dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(memory, 0))
    flat = torch.from_dlpack(array).view(DTYPES[desc.dtype])
    return flat.view(desc.ring_slots, desc.rows_per_slot, desc.hidden_size)


class CudaIpcWriter:
    """Target side: owns the allocation and the event."""

    def __init__(self, ring_slots: int, rows_per_slot: int, hidden_size: int, dtype: torch.dtype, device, epoch=0):
        cp = _cupy()
        self._cp = cp
        self.device = torch.device(device).index or 0
        with cp.cuda.Device(self.device):
            probe = BufferDescriptor("cuda_ipc", "", ring_slots, rows_per_slot, hidden_size, DTYPE_NAMES[dtype])
            self._ptr = cp.cuda.runtime.malloc(probe.nbytes)
            self._event = cp.cuda.Event(block=False, disable_timing=True, interprocess=True)
            handle = cp.cuda.runtime.ipcGetMemHandle(self._ptr) + cp.cuda.runtime.ipcGetEventHandle(self._event.ptr)
            self.descriptor = BufferDescriptor(
                "cuda_ipc",
                "",
                ring_slots,
                rows_per_slot,
                hidden_size,
                DTYPE_NAMES[dtype],
                device_uuid=device_uuid(cp, self.device),
                epoch=epoch,
                ipc_handle=handle,
            )
            self.ring = _as_tensor(cp, self._ptr, probe.nbytes, self, self.descriptor, self.device)

    def write(self, ring_slot: int, rows: torch.Tensor) -> bytes:
        self.ring[ring_slot, : rows.shape[0]].copy_(rows, non_blocking=True)
        stream = torch.cuda.current_stream(self.device)
        self._event.record(self._cp.cuda.ExternalStream(stream.cuda_stream, self.device))
        return b""

    def close(self) -> None:
        if self._ptr:
            torch.cuda.synchronize(self.device)
            self.ring = None
            self._cp.cuda.runtime.free(self._ptr)
            self._ptr = 0


class CudaIpcReader:
    """Drafter side: maps the target's ring and event; reads wait on the GPU, never on the host."""

    def __init__(self, desc: BufferDescriptor):
        mem_handle, event_handle = split_handle(desc)
        cp = _cupy()
        self._cp = cp
        self.descriptor = desc
        self.device = find_device(cp, desc.device_uuid)
        with cp.cuda.Device(self.device):
            self._ptr = cp.cuda.runtime.ipcOpenMemHandle(mem_handle)
            self._event = cp.cuda.runtime.ipcOpenEventHandle(event_handle)
            self.ring = _as_tensor(cp, self._ptr, desc.nbytes, self, desc, self.device)

    def read(self, rng: RowRange, inline: bytes = b"") -> torch.Tensor:
        check_range(self.descriptor, rng)
        stream = torch.cuda.current_stream(self.device)
        self._cp.cuda.runtime.streamWaitEvent(stream.cuda_stream, self._event)
        return self.ring[rng.ring_slot, rng.row_offset : rng.row_offset + rng.num_rows]

    def close(self) -> None:
        if self._ptr:
            self.ring = None
            self._cp.cuda.runtime.ipcCloseMemHandle(self._ptr)
            self._cp.cuda.runtime.eventDestroy(self._event)
            self._ptr = 0

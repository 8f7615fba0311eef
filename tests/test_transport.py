"""Staging transports: shm across a real second process, permissions, validation, cleanup; inline."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import torch

from tandem_core.transport import BufferDescriptor, RowRange, StagingError, make_writer, open_reader
from tandem_core.transport.shm import PREFIX, SHM_DIR, sweep_stale
from tests.helpers import spawn_reader


def test_shm_rows_cross_a_process_boundary_after_the_name_is_gone():
    import json

    writer = make_writer("shm", 2, 8, 4, torch.float32)
    try:
        assert stat.S_IMODE(os.stat(writer.path).st_mode) == 0o600
        proc = spawn_reader(writer.descriptor)
        writer.unlink()  # as after Attach: nothing left to leak
        assert not writer.path.exists()
        rows = torch.arange(20, dtype=torch.float32).view(5, 4)
        writer.write(1, rows)  # written after the reader mapped it: the reader sees it in place
        out, _ = proc.communicate("go\n", timeout=60)
        assert torch.equal(torch.tensor(json.loads(out)), rows[2:5])
    finally:
        writer.close()


@pytest.mark.parametrize("rng", [RowRange(2, 0, 1), RowRange(-1, 0, 1), RowRange(0, 6, 3), RowRange(0, -1, 2)])
def test_reader_refuses_ranges_outside_the_ring(rng):
    writer = make_writer("shm", 2, 8, 4, torch.float32)
    try:
        reader = open_reader(writer.descriptor)
        with pytest.raises(StagingError):
            reader.read(rng)
        reader.close()
    finally:
        writer.close()


def test_reader_refuses_foreign_names_and_short_segments():
    with pytest.raises(StagingError, match="refusing"):
        open_reader(BufferDescriptor("shm", "../etc/passwd", 1, 1, 1, "float32"))
    writer = make_writer("shm", 1, 2, 4, torch.float32)
    try:
        too_big = BufferDescriptor("shm", writer.descriptor.name, 4, 2, 4, "float32")
        with pytest.raises(StagingError, match="bytes"):
            open_reader(too_big)
    finally:
        writer.close()
    assert not writer.path.exists()


def test_sweep_removes_segments_of_dead_creators_only():
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = SHM_DIR / f"{PREFIX}-{int(dead.stdout)}-abc"
    live = make_writer("shm", 1, 1, 4, torch.float32)
    stale.write_bytes(b"x")
    try:
        removed = sweep_stale()
        assert stale.name in removed and not stale.exists()
        assert live.path.exists()
    finally:
        live.close()


def test_inline_round_trip_and_validation():
    writer = make_writer("inline", 2, 8, 4, torch.bfloat16)
    rows = torch.randn(3, 4).to(torch.bfloat16)
    payload = writer.write(0, rows)
    assert len(payload) == 3 * 4 * 2
    reader = open_reader(writer.descriptor)
    assert torch.equal(reader.read(RowRange(0, 1, 2), payload), rows[1:3])
    with pytest.raises(StagingError, match="payload"):
        reader.read(RowRange(0, 2, 2), payload)


@pytest.mark.parametrize("kind", ["shm", "inline"])
def test_every_cpu_transport_in_the_registry_round_trips_rows_and_carries_the_epoch(kind):
    from tandem_core.transport import TRANSPORTS

    writer = TRANSPORTS[kind].writer(2, 8, 4, torch.float32, "cpu", epoch=7)
    assert (writer.descriptor.kind, writer.descriptor.epoch) == (kind, 7)
    rows = torch.randn(3, 4)
    reader = open_reader(writer.descriptor)
    try:
        assert torch.equal(reader.read(RowRange(1, 0, 3), writer.write(1, rows)), rows)
    finally:
        reader.close()
        writer.close()


def test_unknown_transports_are_refused_by_name():
    with pytest.raises(ValueError, match="'carrier-pigeon' is not available"):
        make_writer("carrier-pigeon", 2, 8, 4, torch.float32)
    with pytest.raises(StagingError, match="not supported"):
        open_reader(BufferDescriptor("carrier-pigeon", "", 2, 8, 4, "float32"))


def test_auto_picks_cuda_ipc_only_for_a_model_on_cuda():
    from tandem_core.transport import resolve_kind

    assert resolve_kind("auto", "cpu") == "shm"
    assert resolve_kind("auto", "cuda:0") == "cuda_ipc"
    assert resolve_kind("inline", "cuda:0") == "inline"


@pytest.mark.parametrize(
    "desc, message",
    [
        (BufferDescriptor("cuda_ipc", "", 2, 8, 4, "float32", device_uuid="ab", ipc_handle=b"x" * 64), "128 handle"),
        (BufferDescriptor("cuda_ipc", "", 2, 8, 4, "float32", ipc_handle=b"x" * 128), "UUID"),
        (BufferDescriptor("shm", "", 2, 8, 4, "float32", device_uuid="ab", ipc_handle=b"x" * 128), "cuda_ipc"),
    ],
)
def test_cuda_ipc_descriptors_are_validated_before_any_cuda_call(desc, message):
    from tandem_core.transport.cuda_ipc import split_handle

    with pytest.raises(StagingError, match=message):
        split_handle(desc)


class CupyRuntimeStandIn:
    """Stands in for cupy's CUDA runtime (no GPU here): two visible devices with fixed UUIDs."""

    class cuda:  # noqa: N801 - mirrors cupy's module layout
        class runtime:  # noqa: N801
            @staticmethod
            def getDeviceCount():
                return 2

            @staticmethod
            def getDeviceProperties(index):
                return {"uuid": bytes([index]) * 16}


def test_a_drafter_that_does_not_see_the_targets_gpu_refuses_with_what_it_sees():
    from tandem_core.transport.cuda_ipc import find_device

    cp = CupyRuntimeStandIn()
    assert find_device(cp, (bytes([1]) * 16).hex()) == 1
    with pytest.raises(StagingError, match="this drafter sees"):
        find_device(cp, "ff" * 16)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("ring_slots", 0, "ring_slots must be at least 1"),
        ("ring_slots", -1, "ring_slots must be at least 1"),
        ("rows_per_slot", -4, "rows_per_slot must be at least 1"),
        ("byte_offset", -8, "byte_offset -8"),
        ("byte_offset", 6, "not a multiple of 4"),
        ("dtype", "int8", "dtype 'int8'"),
    ],
)
def test_descriptor_geometry_is_checked_before_mapping(field, value, message):
    good = dict(kind="shm", name="x", ring_slots=2, rows_per_slot=4, hidden_size=8, dtype="float32")
    BufferDescriptor(**good).check()
    with pytest.raises(StagingError, match=message):
        BufferDescriptor(**(good | {field: value})).check()

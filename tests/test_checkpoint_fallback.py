"""Which checkpoint a resume falls back to, in this process: a run's checkpoint folders built here (a peft adapter
that safetensors reads, an optimizer state torch reads, their checksums), each damaged one way at a time.

- `damage()` names what is wrong with a folder (a missing, unreadable or foreign file, bytes changed after the save)
  and nothing for an intact one, a remote one, or one saved before checksums were kept;
- `newest_intact()` walks the rows newest first and takes the first whose state and sampler weights are both intact,
  saying which it passed over; with none intact it raises naming the newest one's damage;
- a row's paths: relative to the run's folder when stored, resolved under it when read (a copied runs/ resumes from
  the copy); remote and outside paths as given;
- the pipeline's check before a run looks at RL checkpoints first, else the SFT ones that saved a state."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from kernelbench_rl.store import Store
from kernelbench_rl.store.files import DiskFullError
from kernelbench_rl.training.checkpoints import (
    ADAPTER_CONFIG,
    ADAPTER_WEIGHTS,
    CHECKSUM_FILE,
    META_FILE,
    OPTIMIZER_FILE,
    CheckpointDamagedError,
    _write_failed,
    check_run_files,
    checksum_damage,
    damage,
    is_remote,
    newest_intact,
    resolved_path,
    seal,
    stored_path,
)

FILES = (META_FILE, ADAPTER_CONFIG, ADAPTER_WEIGHTS, OPTIMIZER_FILE)


def make_folder(folder: Path, *, optimizer: bool = True, sealed: bool = True, extra: bool = False) -> Path:
    """A checkpoint folder as a save leaves it: metadata, adapter, (optimizer state,) checksums."""
    folder.mkdir(parents=True)
    (folder / META_FILE).write_text(json.dumps({"base_model": "tiny", "step": 1}))
    (folder / ADAPTER_CONFIG).write_text(json.dumps({"r": 4, "peft_type": "LORA"}))
    save_file({"lora_A": torch.arange(64, dtype=torch.float32).reshape(8, 8)}, str(folder / ADAPTER_WEIGHTS))
    if optimizer:
        torch.save({"state": {0: {"step": torch.tensor(1.0)}}, "param_groups": [{"lr": 1e-4}]}, folder / OPTIMIZER_FILE)
    if extra:
        (folder / "trainer_state.json").write_text('{"epoch": 1}')
    if sealed:
        seal(folder)
    return folder


def garble_in_place(file: Path) -> None:
    """One byte of the file's end changed: same size, and a safetensors file still loads (its data region)."""
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x01
    file.write_bytes(bytes(data))


def checkpoint(run_dir: Path, step: int, *, sampler: bool = True) -> dict:
    """A row as the checkpoints table keeps it (paths relative to the run's folder), its folders made."""
    make_folder(run_dir / f"step-{step}" / "state")
    if sampler:
        make_folder(run_dir / f"step-{step}" / "sampler", optimizer=False)
    return {"step": step, "name": f"step-{step}", "state_path": f"step-{step}/state",
            "sampler_path": f"step-{step}/sampler" if sampler else None}


# -- damage(): one folder -----------------------------------------------------------------------------------
def test_an_intact_folder_has_no_damage_with_or_without_its_optimizer(tmp_path: Path) -> None:
    state = make_folder(tmp_path / "state", extra=True)
    sampler = make_folder(tmp_path / "sampler", optimizer=False)
    assert damage(str(state), optimizer=True) is None
    assert damage(str(state), optimizer=False) is None
    assert damage(str(sampler), optimizer=False) is None
    assert damage("tinker://run/weights/step-3", optimizer=True) is None  # remote: not ours to read
    assert is_remote("tinker://x") and not is_remote(str(state)) and not is_remote("a:/b")


def test_a_sampler_folder_has_no_optimizer_state_to_miss_but_a_state_folder_has(tmp_path: Path) -> None:
    sampler = make_folder(tmp_path / "sampler", optimizer=False)
    assert damage(str(sampler), optimizer=True) == f"{sampler / OPTIMIZER_FILE} is missing"


@pytest.mark.parametrize("name", FILES)
def test_each_missing_file_is_named(tmp_path: Path, name: str) -> None:
    folder = make_folder(tmp_path / "state")
    (folder / name).unlink()
    assert damage(str(folder), optimizer=True) == f"{folder / name} is missing"


def test_a_missing_folder_is_named(tmp_path: Path) -> None:
    assert damage(str(tmp_path / "gone"), optimizer=False) == f"{tmp_path / 'gone'} is missing"


@pytest.mark.parametrize("name", [META_FILE, ADAPTER_CONFIG])
def test_a_json_file_that_is_not_json_or_no_object_is_named(tmp_path: Path, name: str) -> None:
    folder = make_folder(tmp_path / "state", sealed=False)
    (folder / name).write_text('{"base_model": "tiny"')  # cut short
    assert damage(str(folder), optimizer=True).startswith(f"{folder / name} is not valid JSON (")
    (folder / name).write_bytes(b"\xff\xfe\x00garbage")
    assert damage(str(folder), optimizer=True).startswith(f"{folder / name} is not valid JSON (")
    (folder / name).write_text('["base_model"]')
    assert damage(str(folder), optimizer=True) == f"{folder / name} does not describe a checkpoint"


def test_metadata_must_name_its_base_model_and_the_adapter_config_need_not(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", sealed=False)
    (folder / ADAPTER_CONFIG).write_text('{"r": 4}')
    (folder / META_FILE).write_text('{"step": 1}')
    assert damage(str(folder), optimizer=True) == f"{folder / META_FILE} does not describe a checkpoint"
    (folder / META_FILE).write_text('{"base_model": "tiny"}')
    (folder / ADAPTER_CONFIG).write_text('{}')
    assert damage(str(folder), optimizer=True) is None


def test_unreadable_weights_and_optimizer_state_are_named(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", sealed=False)
    weights = folder / ADAPTER_WEIGHTS
    weights.write_bytes(weights.read_bytes()[:40])  # cut short
    assert damage(str(folder), optimizer=False).startswith(f"{weights} cannot be read (")
    folder = make_folder(tmp_path / "state2", sealed=False)
    state = folder / OPTIMIZER_FILE
    state.write_bytes(state.read_bytes()[:30])
    assert damage(str(folder), optimizer=True).startswith(f"{state} cannot be read (")
    assert damage(str(folder), optimizer=False) is None  # a sampler's check reads no optimizer state
    for foreign in ({"param_groups": []}, [1, 2]):
        torch.save(foreign, state)
        assert damage(str(folder), optimizer=True) == f"{state} holds no optimizer state"


# -- checksums ---------------------------------------------------------------------------------------------
def test_seal_records_every_file_but_its_own_and_the_metadata_names_it(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", extra=True)
    sums = json.loads((folder / CHECKSUM_FILE).read_text())["sha256"]
    assert set(sums) == {*FILES, "trainer_state.json"}
    assert json.loads((folder / META_FILE).read_text())["checksums"] == CHECKSUM_FILE
    import hashlib

    assert sums[ADAPTER_WEIGHTS] == hashlib.sha256((folder / ADAPTER_WEIGHTS).read_bytes()).hexdigest()


@pytest.mark.parametrize("name", [*FILES, "trainer_state.json"])
def test_a_file_garbled_in_place_after_the_save_is_damaged(tmp_path: Path, name: str) -> None:
    """Still loadable, same size: only its checksum tells; every file the checksums list, the extra ones too."""
    folder = make_folder(tmp_path / "state", extra=True)
    if name in (META_FILE, ADAPTER_CONFIG, "trainer_state.json"):
        text = (folder / name).read_text()
        (folder / name).write_text(text.replace("1", "2", 1) if "1" in text else text.replace("4", "5", 1))
    else:
        garble_in_place(folder / name)
    assert damage(str(folder), optimizer=True) == (f"{folder / name} does not match its checksum (its bytes changed "
                                                  "after it was saved)")


def test_the_optimizer_state_is_checked_only_where_it_is_needed(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state")
    sums_file = folder / CHECKSUM_FILE
    sums = json.loads(sums_file.read_text())
    del sums["sha256"][OPTIMIZER_FILE]
    sums_file.write_text(json.dumps(sums))
    assert damage(str(folder), optimizer=True) == f"{sums_file} has no checksum of {OPTIMIZER_FILE}"
    assert damage(str(folder), optimizer=False) is None


@pytest.mark.parametrize("name", [META_FILE, ADAPTER_CONFIG, ADAPTER_WEIGHTS])
def test_a_needed_file_without_its_checksum_is_damage(tmp_path: Path, name: str) -> None:
    folder = make_folder(tmp_path / "sampler", optimizer=False)
    sums_file = folder / CHECKSUM_FILE
    sums = json.loads(sums_file.read_text())
    del sums["sha256"][name]
    sums_file.write_text(json.dumps(sums))
    assert damage(str(folder), optimizer=False) == f"{sums_file} has no checksum of {name}"


def test_a_listed_extra_file_that_went_missing_is_damage(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", extra=True)
    (folder / "trainer_state.json").unlink()
    assert damage(str(folder), optimizer=True) == f"{folder / 'trainer_state.json'} is missing"


def test_missing_checksums_are_damage_only_where_the_metadata_names_them(tmp_path: Path) -> None:
    sealed = make_folder(tmp_path / "sealed")
    (sealed / CHECKSUM_FILE).unlink()
    assert damage(str(sealed), optimizer=True) == f"{sealed / CHECKSUM_FILE} is missing"
    older = make_folder(tmp_path / "older", sealed=False)  # saved before checksums were kept
    assert damage(str(older), optimizer=True) is None
    assert checksum_damage(older, {"base_model": "tiny"}, optimizer=True) is None
    assert checksum_damage(older, {"checksums": CHECKSUM_FILE}, optimizer=True) == f"{older / CHECKSUM_FILE} is missing"


@pytest.mark.parametrize("text, said", [
    ("{not json", "is not valid JSON ("),
    ("[1, 2]", "is not valid JSON ("),  # no object to read the sums from
    ('{"sha256": ["a"]}', "holds no checksums"),
    ('{"md5": {}}', "holds no checksums"),
])
def test_a_checksum_file_that_holds_no_checksums_is_damage(tmp_path: Path, text: str, said: str) -> None:
    folder = make_folder(tmp_path / "state")
    (folder / CHECKSUM_FILE).write_text(text)
    assert damage(str(folder), optimizer=True).startswith(f"{folder / CHECKSUM_FILE} {said}")


# -- newest_intact(): which checkpoint a resume takes --------------------------------------------------------
def _walk(rows, run_dir: Path):
    said: list[str] = []
    found = newest_intact(rows, run_dir, what="checkpoint", run_id="r1", say=said.append)
    return found, said


def test_an_intact_newest_checkpoint_is_taken_without_a_word(tmp_path: Path) -> None:
    rows = [checkpoint(tmp_path, 3), checkpoint(tmp_path, 2)]
    found, said = _walk(rows, tmp_path)
    assert found == {**rows[0], "state_path": str((tmp_path / "step-3/state").resolve()),
                     "sampler_path": str((tmp_path / "step-3/sampler").resolve())}
    assert said == []
    assert newest_intact([], tmp_path, what="checkpoint", run_id="r1", say=said.append) is None and said == []


@pytest.mark.parametrize("where, name", [
    *(("state", name) for name in FILES), *(("sampler", name) for name in FILES if name != OPTIMIZER_FILE)])
def test_damage_to_any_file_of_either_folder_falls_back_to_the_one_before(tmp_path: Path, where: str,
                                                                         name: str) -> None:
    rows = [checkpoint(tmp_path, 3), checkpoint(tmp_path, 2), checkpoint(tmp_path, 1)]
    file = (tmp_path / "step-3" / where / name).resolve()
    garble_in_place(file)
    found, said = _walk(rows, tmp_path)
    assert found["step"] == 2
    assert found["state_path"] == str((tmp_path / "step-2/state").resolve())
    assert found["sampler_path"] == str((tmp_path / "step-2/sampler").resolve())
    assert len(said) == 2
    assert said[0].startswith(f"run r1: the checkpoint of step 3 is damaged ({file} ")
    assert said[0].endswith("); trying the one before it.")
    assert said[1] == "run r1: resuming from checkpoint step 2, the newest intact one."


def test_several_damaged_checkpoints_are_each_passed_over_newest_first(tmp_path: Path) -> None:
    rows = [checkpoint(tmp_path, step) for step in (5, 4, 3, 2)]
    for step in (5, 4, 3):
        garble_in_place(tmp_path / f"step-{step}" / "state" / ADAPTER_WEIGHTS)
    found, said = _walk(rows, tmp_path)
    assert found["step"] == 2
    assert [line.split(" is damaged")[0] for line in said[:-1]] == [
        f"run r1: the checkpoint of step {step}" for step in (5, 4, 3)]
    assert said[-1] == "run r1: resuming from checkpoint step 2, the newest intact one."


def test_with_none_intact_the_error_names_the_newest_ones_damage_and_the_run(tmp_path: Path) -> None:
    rows = [checkpoint(tmp_path, 2), checkpoint(tmp_path, 1)]
    (tmp_path / "step-2" / "sampler" / ADAPTER_CONFIG).unlink()
    garble_in_place(tmp_path / "step-1" / "state" / OPTIMIZER_FILE)
    said: list[str] = []
    with pytest.raises(CheckpointDamagedError) as caught:
        newest_intact(rows, tmp_path, what="SFT checkpoint", run_id="r1", say=said.append)
    message = str(caught.value)
    assert message.startswith("Run r1 has no intact SFT checkpoint to resume from (")
    assert f"{(tmp_path / 'step-2/sampler/adapter_config.json').resolve()} is missing" in message
    assert OPTIMIZER_FILE not in message  # the newest one's damage, not the last one's
    assert f"restore its folder {tmp_path} from a copy" in message
    assert len(said) == 2 and all("trying the one before it" in line for line in said)
    assert caught.value.exit_code == 5


def test_a_state_is_read_with_its_optimizer_and_the_sampler_without(tmp_path: Path) -> None:
    rows = [checkpoint(tmp_path, 2), checkpoint(tmp_path, 1)]
    (tmp_path / "step-2" / "state" / OPTIMIZER_FILE).unlink()
    found, _ = _walk(rows, tmp_path)
    assert found["step"] == 1  # a state without its optimizer cannot resume training
    rows = [checkpoint(tmp_path / "b", 2)]
    found, _ = _walk(rows, tmp_path / "b")  # the sampler folder has no optimizer state and needs none
    assert found["step"] == 2


def test_a_row_without_a_sampler_or_with_remote_paths_is_taken_as_it_is(tmp_path: Path) -> None:
    rows = [checkpoint(tmp_path, 2, sampler=False)]
    found, said = _walk(rows, tmp_path)
    assert found["step"] == 2 and found["sampler_path"] is None and said == []
    remote = {"step": 9, "state_path": "tinker://run/state/9", "sampler_path": "tinker://run/sampler/9"}
    found, said = _walk([remote], tmp_path)
    assert found == remote and said == []


# -- stored and resolved paths ---------------------------------------------------------------------------
def test_paths_are_stored_relative_to_the_run_and_resolved_under_it(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "r1"
    inside = run_dir / "step-3" / "state"
    assert stored_path(str(inside), run_dir) == "step-3/state"
    assert resolved_path("step-3/state", run_dir) == str(inside.resolve())
    copy = tmp_path / "copy" / "r1"  # a copied runs/ resumes from the copy's files
    assert resolved_path(stored_path(str(inside), run_dir), copy) == str((copy / "step-3/state").resolve())
    outside = str(tmp_path / "elsewhere" / "state")
    assert stored_path(outside, run_dir) == outside and resolved_path(outside, copy) == outside
    for path in (None, "tinker://run/state/3"):
        assert stored_path(path, run_dir) == path and resolved_path(path, run_dir) == path


def test_a_failed_write_without_its_cause_is_read_as_a_full_disk(tmp_path: Path) -> None:
    for text in ("PytorchStreamWriter failed writing file data/0", "[enforce fail] file write failed"):
        error = _write_failed(tmp_path, "step-3", RuntimeError(text))
        assert isinstance(error, DiskFullError)
        assert str(error).startswith(f"Could not write checkpoint step-3 in {tmp_path} (")
    assert _write_failed(tmp_path, "step-3", RuntimeError("CUDA out of memory")) is None


# -- the pipeline's check before a run ------------------------------------------------------------------------
def _rows(store: Store, table: str, run_dir: Path, steps, *, state: bool = True) -> None:
    rows = []
    for step in steps:
        row = checkpoint(run_dir, step) if state else {"step": step, "state_path": None, "sampler_path": None}
        extra = {"name": row["name"]} if table == "checkpoints" else {}
        rows.append({"run_id": "r1", "step": step, "state_path": row["state_path"],
                     "sampler_path": row["sampler_path"], **extra})
    store.upsert(table, rows)


def test_the_check_before_a_run_passes_a_damaged_newest_checkpoint_and_refuses_a_run_with_none_intact(
        tmp_path: Path) -> None:
    db, logs = tmp_path / "kb.duckdb", tmp_path / "runs"
    run_dir = logs / "r1"
    store = Store(db)
    check_run_files(db, logs, "r1")  # no checkpoint at all: a new run
    _rows(store, "checkpoints", run_dir, [2, 1])
    garble_in_place(run_dir / "step-2" / "state" / ADAPTER_WEIGHTS)
    check_run_files(db, logs, "r1")  # step 1 is intact: the run resumes from it
    garble_in_place(run_dir / "step-1" / "sampler" / ADAPTER_WEIGHTS)
    with pytest.raises(CheckpointDamagedError, match="Run r1 has no intact checkpoint to resume from"):
        check_run_files(db, logs, "r1")


def test_the_check_before_a_run_reads_sft_checkpoints_only_when_there_is_no_rl_one(tmp_path: Path) -> None:
    db, logs = tmp_path / "kb.duckdb", tmp_path / "runs"
    run_dir = logs / "r1"
    store = Store(db)
    _rows(store, "sft_steps", run_dir / "sft", [4], state=False)  # steps that saved nothing are not checkpoints
    check_run_files(db, logs, "r1")
    store.upsert("sft_steps", [{"run_id": "r1", "step": 3, "state_path": "sft/step-3/state",
                                "sampler_path": "sft/step-3/sampler"}])
    make_folder(run_dir / "sft" / "step-3" / "state")
    make_folder(run_dir / "sft" / "step-3" / "sampler", optimizer=False)
    check_run_files(db, logs, "r1")
    garble_in_place(run_dir / "sft" / "step-3" / "state" / ADAPTER_WEIGHTS)
    with pytest.raises(CheckpointDamagedError, match="Run r1 has no intact SFT checkpoint to resume from"):
        check_run_files(db, logs, "r1")
    _rows(store, "checkpoints", run_dir, [7])  # an RL checkpoint: the SFT ones no longer matter
    check_run_files(db, logs, "r1")
    store.upsert("sft_steps", [{"run_id": "other", "step": 1, "state_path": "x", "sampler_path": "y"}])
    check_run_files(db, logs, "fresh")  # another run's checkpoints are not this one's


# -- what a damage says, in the words of the failure -----------------------------------------------------------
def test_each_unreadable_file_is_told_with_the_readers_own_words(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", sealed=False)
    (folder / META_FILE).write_text('{"base_model": "tiny"')
    assert damage(str(folder), optimizer=True) == (f"{folder / META_FILE} is not valid JSON (Expecting ',' delimiter: "
                                                   "line 1 column 22 (char 21))")
    folder = make_folder(tmp_path / "weights", sealed=False)
    (folder / ADAPTER_WEIGHTS).write_bytes((folder / ADAPTER_WEIGHTS).read_bytes()[:40])
    assert damage(str(folder), optimizer=False) == (f"{folder / ADAPTER_WEIGHTS} cannot be read (Error while "
                                                    "deserializing header: invalid header length)")
    folder = make_folder(tmp_path / "optimizer", sealed=False)
    (folder / OPTIMIZER_FILE).write_bytes((folder / OPTIMIZER_FILE).read_bytes()[:30])
    assert damage(str(folder), optimizer=True).startswith(
        f"{folder / OPTIMIZER_FILE} cannot be read (PytorchStreamReader failed reading zip archive")
    folder = make_folder(tmp_path / "sums")
    (folder / CHECKSUM_FILE).write_text("{not json")
    assert damage(str(folder), optimizer=True) == (f"{folder / CHECKSUM_FILE} is not valid JSON (Expecting property "
                                                   "name enclosed in double quotes: line 1 column 2 (char 1))")


def test_a_listed_file_that_cannot_be_read_is_told(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", extra=True)
    (folder / "trainer_state.json").unlink()
    (folder / "trainer_state.json").mkdir()  # a folder where a file was
    # The reader's words are cut at 120 characters, so how much of the path they repeat depends on where tmp lies.
    told = damage(str(folder), optimizer=True)
    assert told.startswith(f"{folder / 'trainer_state.json'} cannot be read ([Errno 21] Is a directory: '")
    assert told.endswith(")")


class Foreign:
    """An object a weights-only load refuses: unpickling it could run any code."""


def test_an_optimizer_state_that_needs_more_than_weights_to_load_is_damage(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state", sealed=False)
    torch.save({"state": {}, "param_groups": [], "extra": Foreign()}, folder / OPTIMIZER_FILE)
    said = damage(str(folder), optimizer=True)
    assert said is not None and said.startswith(f"{folder / OPTIMIZER_FILE} cannot be read (Weights only load failed")


def test_a_write_failure_without_its_cause_says_what_to_do(tmp_path: Path) -> None:
    error = _write_failed(tmp_path, "step-3", RuntimeError("[enforce fail]   file write failed"))
    assert str(error) == (f"Could not write checkpoint step-3 in {tmp_path} ([enforce fail] file write failed): the "
                          "disk or a file-size limit is likely full, so free some space and run the same command again.")


def test_a_walk_without_a_listener_tells_stderr(tmp_path: Path, capsys) -> None:
    rows = [checkpoint(tmp_path, 2), checkpoint(tmp_path, 1)]
    garble_in_place(tmp_path / "step-2" / "state" / ADAPTER_WEIGHTS)
    assert newest_intact(rows, tmp_path, what="checkpoint", run_id="r1")["step"] == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines()[0].startswith("run r1: the checkpoint of step 2 is damaged (")
    assert err.splitlines()[1] == "run r1: resuming from checkpoint step 1, the newest intact one."


@pytest.mark.parametrize("table", ["checkpoints", "sft_steps"])  # RL's checkpoints and the SFT warm start's
def test_the_check_before_a_run_passes_over_a_damaged_checkpoint_without_a_word(table: str, tmp_path: Path,
                                                                                  capsys) -> None:
    db, logs = tmp_path / "kb.duckdb", tmp_path / "runs"
    _rows(Store(db), table, logs / "r1", [2, 1])
    garble_in_place(logs / "r1" / "step-2" / "state" / ADAPTER_WEIGHTS)
    capsys.readouterr()
    check_run_files(db, logs, "r1")
    assert capsys.readouterr() == ("", "")


def test_the_check_before_a_run_makes_sure_of_both_folders_and_names_each(tmp_path: Path, monkeypatch) -> None:
    import kernelbench_rl.store.files as files

    made: list[tuple[Path, str]] = []
    real = files.writable_folder
    monkeypatch.setattr(files, "writable_folder", lambda path, what: (made.append((Path(path), what)),
                                                                       real(path, what))[1])
    db, logs = tmp_path / "db" / "kb.duckdb", tmp_path / "runs"
    check_run_files(db, logs, "r1")
    assert made == [(tmp_path / "db", "the database's folder"), (logs, "the logs' folder")]
    # too little room where the logs go (and enough where the database is): the logs' folder is named
    monkeypatch.setenv("KBRL_MIN_FREE_MB", "100")
    real_usage = files.shutil.disk_usage

    def usage(path):
        found = real_usage(path)
        return found._replace(free=2**20) if str(path).startswith(str(logs)) else found._replace(free=2**40)

    monkeypatch.setattr(files.shutil, "disk_usage", usage)
    with pytest.raises(DiskFullError, match=rf"^Only 1 MiB is free on the disk of {logs} \(before the run; at least "):
        check_run_files(db, logs, "r1")
    monkeypatch.setattr(files.shutil, "disk_usage", lambda path: real_usage(path)._replace(free=2**20))
    with pytest.raises(DiskFullError, match=rf"^Only 1 MiB is free on the disk of {db} \(before the run; at least "):
        check_run_files(db, logs, "r1")


def test_a_folder_sealed_again_after_a_new_save_stays_intact_and_subfolders_are_not_summed(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "state")
    (folder / "logs").mkdir()  # a subfolder: no file to sum
    save_file({"lora_A": torch.ones(8, 8)}, str(folder / ADAPTER_WEIGHTS))  # saved again under the same name
    seal(folder)
    sums = json.loads((folder / CHECKSUM_FILE).read_text())["sha256"]
    assert set(sums) == set(FILES)  # neither its own checksums nor the subfolder
    assert damage(str(folder), optimizer=True) is None


def test_a_row_without_a_state_is_judged_on_its_sampler(tmp_path: Path) -> None:
    rows = [checkpoint(tmp_path, 2), checkpoint(tmp_path, 1)]
    rows[0] = {**rows[0], "state_path": None}
    found, said = _walk(rows, tmp_path)
    assert found["step"] == 2 and found["state_path"] is None and said == []
    garble_in_place(tmp_path / "step-2" / "sampler" / ADAPTER_WEIGHTS)
    found, _ = _walk(rows, tmp_path)
    assert found["step"] == 1


def test_a_state_saved_before_checksums_needs_its_optimizer_state(tmp_path: Path) -> None:
    """Without checksums only the optimizer check tells that a training state lacks it."""
    make_folder(tmp_path / "step-2" / "state", sealed=False)
    make_folder(tmp_path / "step-2" / "sampler", optimizer=False, sealed=False)
    rows = [{"step": 2, "state_path": "step-2/state", "sampler_path": "step-2/sampler"}, checkpoint(tmp_path, 1)]
    assert _walk(rows, tmp_path)[0]["step"] == 2
    (tmp_path / "step-2" / "state" / OPTIMIZER_FILE).unlink()
    found, said = _walk(rows, tmp_path)
    assert found["step"] == 1
    assert said[0].startswith(f"run r1: the checkpoint of step 2 is damaged ({(tmp_path / 'step-2/state').resolve()}/"
                              f"{OPTIMIZER_FILE} is missing)")


def test_an_optimizer_state_saved_on_a_gpu_reads_as_intact_on_a_machine_without_one(tmp_path: Path,
                                                                                   monkeypatch) -> None:
    """The check before a run may run where no GPU is (a login node, the CPU): a state whose tensors were saved on a
    GPU is read onto the CPU, not taken for damage. The save is made here as a GPU's would be (its storages tagged
    cuda:0)."""
    import torch.serialization

    folder = make_folder(tmp_path / "state", sealed=False)
    with monkeypatch.context() as patched:
        patched.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        torch.save({"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 1e-4}]}, folder / OPTIMIZER_FILE)
    seal(folder)
    assert damage(str(folder), optimizer=True) is None

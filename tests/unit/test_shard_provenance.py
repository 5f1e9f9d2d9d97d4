"""Where each run of a shard was computed, from its record (``shard_worker.record_provenance``): run lengths of
hosts and workers, or, in a record written before they were kept, its one host where it copied nothing."""

from __future__ import annotations

from hbvm_workflow.shard_worker import record_provenance


def test_a_records_run_lengths_give_each_run_its_host_and_worker():
    rec = {"hosts": [["a", 2], ["b", 1]], "workers": [["tcp://a:1", 2], ["tcp://b:2", 1]], "host": "b"}
    got = record_provenance(rec, 3)
    assert got["host"].tolist() == ["a", "a", "b"] and got["worker"].tolist() == ["tcp://a:1", "tcp://a:1", "tcp://b:2"]


def test_an_older_record_names_its_host_only_where_it_copied_nothing():
    assert record_provenance({"host": "c", "copied": 0}, 2)["host"].tolist() == ["c", "c"]
    assert record_provenance({"host": "c", "copied": 0}, 2)["worker"].tolist() == ["", ""]
    assert record_provenance({"host": "c", "copied": 1}, 2)["host"].tolist() == ["", ""]  # which run is whose: unknown
    assert record_provenance({"hosts": [["a", 1]], "host": "a"}, 2)["host"].tolist() == ["a", "a"]  # counts wrong
    assert record_provenance(None, 2)["host"].tolist() == ["", ""]

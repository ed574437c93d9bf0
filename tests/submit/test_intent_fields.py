"""The intent's fields are defined once (`tags.INTENT_KEYS`, for code that may import nothing)
and typed once (`core.Intent`); everything else derives from one of them. These tests hold the
copies that can not be derived to the same fields, order and defaults."""

from __future__ import annotations

import dataclasses
import enum

from sqlalchemy import Table

from slurm_rl.core import Intent, ServiceClass
from slurm_rl.db.models import Job
from slurm_rl.db.repo import intent_json
from slurm_rl.submit.intent import decode_comment, encode_intent
from slurm_rl.submit.rlflags import IntentValues
from slurm_rl.submit.tags import INTENT_FIELDS, INTENT_KEYS, SERVICE_CLASSES


def _plain(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


def test_the_codec_table_names_intents_fields_in_order_with_their_defaults() -> None:
    typed = {f.name: _plain(f.default) for f in dataclasses.fields(Intent)}
    assert tuple(typed) == INTENT_FIELDS
    assert {name: default for name, _, _, default in INTENT_KEYS} == typed
    assert SERVICE_CLASSES == tuple(m.value for m in ServiceClass)


def test_rlsbatch_values_start_as_the_defaults() -> None:
    assert IntentValues.__slots__ == INTENT_FIELDS
    assert IntentValues().as_dict() == {name: default for name, _, _, default in INTENT_KEYS}


def test_the_job_table_has_a_nullable_column_per_intent_field() -> None:
    columns = Job.__table__.columns
    assert isinstance(Job.__table__, Table)
    for name in INTENT_FIELDS:
        assert name in columns and columns[name].nullable, name


def test_every_field_survives_the_comment_and_the_database_json() -> None:
    full = Intent(deadline=1_900_000_000.0, hard=True, service_class=ServiceClass.CRITICAL,
                  gpus_min=2, gpus_max=8, elastic=True, total_steps=1000, model="bert",
                  batch_size=64, inference="mobilenet")
    # every field differs from its default, so a field the codec forgot would show here
    assert all(getattr(full, f.name) != f.default for f in dataclasses.fields(Intent))
    assert encode_intent(full) == (
        "{rl1:d=1900000000,h,c=critical,g=2-8,e,s=1000,m=bert,b=64,i=mobilenet}")
    assert decode_comment(encode_intent(full)).intent == full
    # `intent_last` rows written by earlier releases compare as text: this string may not change
    # for an intent without the fields added later (`inference`: only when set)
    assert intent_json(full) == (
        '{"deadline":1900000000.0,"hard":true,"class":"critical","gpus_min":2,"gpus_max":8,'
        '"elastic":true,"total_steps":1000,"model":"bert","batch_size":64,'
        '"inference":"mobilenet"}')
    assert intent_json(dataclasses.replace(full, inference=None)) == (
        '{"deadline":1900000000.0,"hard":true,"class":"critical","gpus_min":2,"gpus_max":8,'
        '"elastic":true,"total_steps":1000,"model":"bert","batch_size":64}')
    assert intent_json(Intent()) == (
        '{"deadline":null,"hard":false,"class":"standard","gpus_min":null,"gpus_max":null,'
        '"elastic":false,"total_steps":null,"model":null,"batch_size":null}')

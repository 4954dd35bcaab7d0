"""The built-in demo app (``punctual.demo:app``): four tiny workflows to try punctual with."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from punctual.workflows import App, RunContext

app = App(name="demo")


class EchoInput(BaseModel):
    model_config = ConfigDict(extra="forbid")
    message: str


class SleepInput(BaseModel):
    seconds: float = Field(ge=0)


class FailInput(BaseModel):
    pass


class ScoreInput(BaseModel):
    score: float


class DemoFailure(Exception):
    """What the ``fail`` workflow raises, so its run fails on purpose."""


@app.workflow("echo", "1", input=EchoInput)
def echo(payload: EchoInput) -> dict[str, Any]:
    return {"message": payload.message}


@app.workflow("sleep", "1", input=SleepInput)
async def sleep(payload: SleepInput, ctx: RunContext) -> dict[str, Any]:
    await ctx.sleep_async(payload.seconds)
    ctx.raise_if_canceled()
    return {"slept": payload.seconds}


@app.workflow("fail", "1", input=FailInput)
def fail(payload: FailInput) -> dict[str, Any]:
    raise DemoFailure("the demo workflow 'fail' always fails")


@app.workflow("score", "1", input=ScoreInput)
def score(payload: ScoreInput) -> dict[str, Any]:
    return {"metrics": {"score": payload.score}}

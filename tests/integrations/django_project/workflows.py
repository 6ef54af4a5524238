"""The App of the test project."""

from typing import Any

from harvest import App, activity, workflow


@activity
def shout(ctx: Any, name: str) -> str:
    return name.upper()


@workflow
async def greet(ctx: Any, name: str) -> str:
    return "hello " + await ctx.execute_activity(shout, name)


app = App(workflows=[greet], activities=[shout])

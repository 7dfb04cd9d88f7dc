"""An a2a-sdk 0.3.x client: checks that Proctor's reference agents serve 0.3 orchestrators.

Runs in the separate 0.3 venv the tests make:

    python client03.py URL MESSAGE_JSON [--no-streaming]

MESSAGE_JSON is `{"text": …, "data": {…}}`. Prints the final task (or message)
as JSON on stdout, in the 0.3 wire form.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid

import httpx
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import DataPart, Message, Part, Role, TextPart


async def ask(url: str, text: str, data: dict, streaming: bool) -> dict:
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, url).get_agent_card()
        client = ClientFactory(ClientConfig(httpx_client=http, streaming=streaming)).create(card)
        message = Message(role=Role.user, message_id=str(uuid.uuid4()),
                          parts=[Part(root=TextPart(text=text)), Part(root=DataPart(data=data))])
        last: dict = {}
        async for event in client.send_message(message):
            item = event[0] if isinstance(event, tuple) else event
            last = item.model_dump(mode="json", exclude_none=True)
        return {"protocol_version": card.protocol_version, "reply": last}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("message")
    parser.add_argument("--no-streaming", action="store_true")
    args = parser.parse_args()
    message = json.loads(args.message)
    result = asyncio.run(ask(args.url, message["text"], message.get("data", {}),
                             not args.no_streaming))
    print(json.dumps(result))


if __name__ == "__main__":
    main()

"""Webhook payloads against the vendors' documented robot APIs, signatures against hand-computed values.

The expected signatures were computed outside Python, with OpenSSL:

    printf '%s' "$BODY" | openssl dgst -sha256 -hmac 's3cr3t'                       # generic
    printf '%s\\n%s' 1796093400000 SECtest | openssl dgst -sha256 -hmac SECtest -binary | base64
    printf '' | openssl dgst -sha256 -hmac "$(printf '%s\\n%s' 1796093400 feishu-secret)" -binary | base64
"""

import json
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest

from leasing.notify import webhooks
from leasing.notify.webhooks import HttpResponse, Message

NOW = datetime(2026, 12, 1, 2, 50, tzinfo=UTC)  # 1796093400 s since the epoch
MESSAGE = Message(
    event="lease_expiring",
    title="Lease 7 ends in 10 minutes",
    body="2 × A100 end at 2026-12-01 11:00.",
    url="https://cardpool.example/leases/7/#extend",
    lease=7,
    id=42,
    data={"offset_minutes": 10},
    open_label="Open in Cardpool",
    severity="warning",
)


def payload(request) -> dict:
    assert request.headers["Content-Type"] == "application/json; charset=utf-8"
    return json.loads(request.body.decode("utf-8"))


# --- generic -----------------------------------------------------------------------------

GENERIC_BODY = (
    '{"id":42,"event":"lease_expiring","title":"Lease 7 ends in 10 minutes",'
    '"body":"2 × A100 end at 2026-12-01 11:00.","url":"https://cardpool.example/leases/7/#extend",'
    '"lease":7,"data":{"offset_minutes":10},"sent_at":"2026-12-01T02:50:00Z"}'
)


def test_generic_body_and_signature():
    request = webhooks.generic(
        url="https://hooks.example/cardpool", secret="s3cr3t", message=MESSAGE, now=NOW
    )
    assert request.url == "https://hooks.example/cardpool"
    assert request.body == GENERIC_BODY.encode("utf-8")
    assert request.headers["X-Cardpool-Event"] == "lease_expiring"
    assert request.headers["X-Cardpool-Signature"] == (
        "sha256=0d4a4f1dafcf2440d08ef8ac05e2ce4fb10f687de08d55347dd908cdccc8bede"
    )
    assert {"event", "title", "body", "url", "lease", "sent_at"} <= set(payload(request))


def test_generic_without_secret_is_unsigned():
    request = webhooks.generic(url="https://hooks.example/", secret="", message=MESSAGE, now=NOW)
    assert "X-Cardpool-Signature" not in request.headers
    assert request.body == GENERIC_BODY.encode("utf-8")


# --- WeCom -------------------------------------------------------------------------------

WECOM_URL = "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=693a91f6-7xxx"


def test_wecom_markdown_message():
    request = webhooks.wecom(url=WECOM_URL, secret="", message=MESSAGE, now=NOW)
    assert request.url == WECOM_URL  # the key is in the URL; WeCom robots are not signed
    body = payload(request)
    assert set(body) == {"msgtype", "markdown"}
    assert body["msgtype"] == "markdown"
    assert set(body["markdown"]) == {"content"}
    assert body["markdown"]["content"] == (
        '**<font color="warning">[Cardpool] Lease 7 ends in 10 minutes</font>**\n'
        "2 × A100 end at 2026-12-01 11:00.\n"
        "[Open in Cardpool](https://cardpool.example/leases/7/#extend)"
    )


def test_wecom_content_stays_within_4096_bytes():
    long = Message(event="lease_ended", title="长" * 50, body="卡" * 5000, url="https://x.example/")
    content = payload(webhooks.wecom(url=WECOM_URL, secret="", message=long, now=NOW))
    assert len(content["markdown"]["content"].encode("utf-8")) <= 4096


# --- DingTalk ----------------------------------------------------------------------------

DINGTALK_URL = "https://oapi.dingtalk.com/robot/send?access_token=abc123"


def test_dingtalk_markdown_message_signed_in_the_query():
    request = webhooks.dingtalk(url=DINGTALK_URL, secret="SECtest", message=MESSAGE, now=NOW)
    body = payload(request)
    assert set(body) == {"msgtype", "markdown"}
    assert body["msgtype"] == "markdown"
    assert body["markdown"]["title"] == "[Cardpool] Lease 7 ends in 10 minutes"
    assert body["markdown"]["text"] == (
        "#### [Cardpool] Lease 7 ends in 10 minutes\n\n"
        "2 × A100 end at 2026-12-01 11:00.\n\n"
        "[Open in Cardpool](https://cardpool.example/leases/7/#extend)"
    )
    # timestamp in milliseconds; the base64 signature URL-encoded (+ / =).
    assert request.url == (
        "https://oapi.dingtalk.com/robot/send?access_token=abc123&timestamp=1796093400000"
        "&sign=SMZd%2BemZJY%2FTf4uK9GVDwTXJW4WDu%2FwQWPj%2FgxZDDl8%3D"
    )
    query = parse_qs(urlsplit(request.url).query)
    assert query["sign"] == ["SMZd+emZJY/Tf4uK9GVDwTXJW4WDu/wQWPj/gxZDDl8="]
    assert webhooks.dingtalk_sign("SECtest", 1796093400000) == query["sign"][0]


def test_dingtalk_without_secret_keeps_the_url():
    request = webhooks.dingtalk(url=DINGTALK_URL, secret="", message=MESSAGE, now=NOW)
    assert request.url == DINGTALK_URL


def test_dingtalk_body_lines_become_paragraphs():
    two_lines = Message(event="lease_failed", title="t", body="one\ntwo")
    text = payload(webhooks.dingtalk(url=DINGTALK_URL, secret="", message=two_lines, now=NOW))
    assert "one\n\ntwo" in text["markdown"]["text"]


# --- Feishu ------------------------------------------------------------------------------

FEISHU_URL = "https://open.feishu.cn/open-apis/bot/v2/hook/xxxxxxxx"


def test_feishu_interactive_card_signed_in_the_body():
    request = webhooks.feishu(url=FEISHU_URL, secret="feishu-secret", message=MESSAGE, now=NOW)
    assert request.url == FEISHU_URL
    body = payload(request)
    assert body["timestamp"] == "1796093400"  # seconds, as a string
    assert body["sign"] == "OjcN/9LDpynv9+s/aLnzQhiyxy4ys5JI97ZHgMdybL8="
    assert body["msg_type"] == "interactive"
    card = body["card"]
    assert card["header"] == {
        "title": {"tag": "plain_text", "content": "[Cardpool] Lease 7 ends in 10 minutes"},
        "template": "orange",
    }
    assert card["elements"] == [
        {"tag": "div", "text": {"tag": "lark_md", "content": "2 × A100 end at 2026-12-01 11:00."}},
        {
            "tag": "action",
            "actions": [
                {
                    "tag": "button",
                    "text": {"tag": "plain_text", "content": "Open in Cardpool"},
                    "type": "primary",
                    "url": "https://cardpool.example/leases/7/#extend",
                }
            ],
        },
    ]


def test_feishu_without_secret_has_no_signature_fields():
    body = payload(webhooks.feishu(url=FEISHU_URL, secret="", message=MESSAGE, now=NOW))
    assert set(body) == {"msg_type", "card"}


def test_build_dispatches_and_refuses_unknown_formats():
    assert webhooks.build("wecom", url=WECOM_URL, secret="", message=MESSAGE, now=NOW).url == (
        WECOM_URL
    )
    with pytest.raises(ValueError):
        webhooks.build("slack", url=WECOM_URL, secret="", message=MESSAGE, now=NOW)


# --- replies -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "status", "body", "ok", "retry"),
    [
        ("generic", 200, "", True, False),
        ("generic", 204, "", True, False),
        ("generic", 500, "", False, True),
        ("generic", 503, "", False, True),
        ("generic", 429, "", False, True),
        ("generic", 404, "", False, False),
        ("generic", 302, "", False, False),
        ("generic", None, "", False, True),
        ("wecom", 200, '{"errcode":0,"errmsg":"ok"}', True, False),
        ("wecom", 200, '{"errcode":93000,"errmsg":"invalid webhook url"}', False, False),
        ("wecom", 200, '{"errcode":45009,"errmsg":"api freq out of limit"}', False, True),
        ("dingtalk", 200, '{"errcode":0,"errmsg":"ok"}', True, False),
        ("dingtalk", 200, '{"errcode":310000,"errmsg":"sign not match"}', False, False),
        ("dingtalk", 200, '{"errcode":130101,"errmsg":"send too fast"}', False, True),
        ("feishu", 200, '{"code":0,"msg":"success","data":{}}', True, False),
        ("feishu", 200, '{"StatusCode":0,"StatusMessage":"success"}', True, False),
        ("feishu", 200, '{"code":19021,"msg":"sign match fail"}', False, False),
        ("feishu", 200, '{"code":9499,"msg":"Bad Request","data":{}}', False, False),
        ("feishu", 200, "<html>proxy</html>", False, False),
        ("wecom", 200, "{}", False, False),
    ],
)
def test_judge(fmt, status, body, ok, retry):
    verdict = webhooks.judge(fmt, HttpResponse(status=status, body=body))
    assert (verdict.ok, verdict.retry) == (ok, retry)
    assert verdict.ok or verdict.error


def test_judge_names_the_robot_error():
    verdict = webhooks.judge(
        "feishu", HttpResponse(status=200, body='{"code":19021,"msg":"sign match fail"}')
    )
    assert verdict.error == "robot error 19021: sign match fail"

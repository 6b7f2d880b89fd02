"""The leasing app's models, one module per domain, all under the app label ``leasing``.

Tables and migrations stay where they were (PostHog ``posthog/models/__init__.py`` style):
Django finds every model through this package. Choices and state groups live in
``leasing.choices``.
"""

from leasing.models.billing import (
    OffPeakWindow,
    Price,
    PricePeriod,
    Statement,
    TeamPrice,
    UsageRecord,
)
from leasing.models.health import Alert, AlertRule
from leasing.models.lease import (
    REQUEST_KEY_MAX,
    Allocation,
    BackendCall,
    Lease,
    LeaseChange,
    LeaseEvent,
    PlanVersion,
    QueueMark,
)
from leasing.models.notify import (
    Delivery,
    DeliveryAttempt,
    LeaseWarning,
    Notification,
    NotificationPreference,
    Webhook,
)
from leasing.models.teams import (
    FairShare,
    FairSharePolicy,
    GuaranteedShare,
    MemberLimit,
    Quota,
    QuotaLimits,
)
from leasing.models.workbench import (
    LIVE_SESSION_STATES,
    Environment,
    Session,
    SessionStatus,
    SshKey,
    WorkspaceUsage,
)

__all__ = [
    "LIVE_SESSION_STATES",
    "Alert",
    "AlertRule",
    "REQUEST_KEY_MAX",
    "Allocation",
    "BackendCall",
    "Delivery",
    "DeliveryAttempt",
    "FairShare",
    "FairSharePolicy",
    "GuaranteedShare",
    "Environment",
    "Lease",
    "LeaseChange",
    "LeaseEvent",
    "PlanVersion",
    "QueueMark",
    "LeaseWarning",
    "MemberLimit",
    "Notification",
    "OffPeakWindow",
    "NotificationPreference",
    "Price",
    "PricePeriod",
    "Quota",
    "Statement",
    "QuotaLimits",
    "Session",
    "SessionStatus",
    "SshKey",
    "TeamPrice",
    "UsageRecord",
    "Webhook",
    "WorkspaceUsage",
]

"""What a team may use and who decides: quota rules and member limits (quotas, services),
admission, the lead's approvals; the team page and API."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("leasing", "0028_delivery_attempt"),
    ]

    operations = [
        migrations.AddField(
            model_name="lease",
            name="warn_at",
            field=models.DateTimeField(
                blank=True,
                help_text=(
                    "When the tick looks at this lease's warnings next: the next one's due time, "
                    "else the end. Empty: not worked out yet."
                ),
                null=True,
                verbose_name="next warning due",
            ),
        ),
        migrations.AddIndex(
            model_name="lease",
            index=models.Index(fields=["status", "warn_at"], name="lease_status_warn_idx"),
        ),
    ]

"""A job spec and its checks, on the laptop, before anything is sent: no network here."""

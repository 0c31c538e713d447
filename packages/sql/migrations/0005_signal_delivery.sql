-- Callback URLs and webhook deliveries (docs/adr/0010-signal-delivery.md): a callback's expiry is
-- fixed the first time it is handed out; a delivery id is kept once its outcome was written.

CREATE TABLE "{{schema}}".callbacks (
  run_id bigint NOT NULL,
  signal text NOT NULL,
  expires_at timestamptz NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (run_id, signal)
);
CREATE TABLE "{{schema}}".signal_deliveries (
  id text PRIMARY KEY,
  run_id bigint NOT NULL,
  signal text NOT NULL,
  at timestamptz NOT NULL DEFAULT now()
);

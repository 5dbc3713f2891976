"""SMetricPool operator: typed spec (``spec``), pure renderer (``render``), kopf controller (``handlers``)."""

"""A real S3 server for the remote-cache tests: moto's, on 127.0.0.1 and a free port, in a process of its
own (a server thread in the test process would stop a build there from forking its converter worker).

It enforces IAM after its setup: a ``writer`` user may do anything, a ``reader`` may only get and list
(a fork's pull request), so a refused write is the server's answer, not a simulation. Run as a script, it
prints the address and the two users' keys as one JSON line, then serves until its stdin closes.
"""

from __future__ import annotations

import json
import os
import sys

SETUP_ACTIONS = 6  # the requests below made before IAM is enforced: 2 users, 2 policies, 2 access keys


def _serve() -> None:
    os.environ["INITIAL_NO_AUTH_ACTION_COUNT"] = str(SETUP_ACTIONS)  # read when moto is imported
    os.environ.update(AWS_ACCESS_KEY_ID="setup", AWS_SECRET_ACCESS_KEY="setup", AWS_DEFAULT_REGION="us-east-1")
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    import boto3

    iam = boto3.client("iam", endpoint_url=f"http://{host}:{port}")
    keys = {}
    for user, actions in (("writer", ["s3:*"]), ("reader", ["s3:Get*", "s3:List*"])):
        iam.create_user(UserName=user)
        iam.put_user_policy(UserName=user, PolicyName=user, PolicyDocument=json.dumps({
            "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": actions, "Resource": "*"}]}))
        made = iam.create_access_key(UserName=user)["AccessKey"]
        keys[user] = [made["AccessKeyId"], made["SecretAccessKey"]]
    print(json.dumps({"endpoint": f"http://{host}:{port}", **keys}), flush=True)
    sys.stdin.read()
    server.stop()


if __name__ == "__main__":
    _serve()

"""RocketMQ's remoting protocol (the one mqadmin and the dashboard speak): codec, client, admin calls.

Modules, one job each:
  codes          request, response, language and serialize-type numbers
  command        the command value (code, opaque, flags, extFields, body)
  header_json    the header in fastjson's JSON form
  header_binary  the header in RocketMQ's own binary form (RocketMQSerializable)
  frame          framing: length prefixes, serialize type byte, frame size bound
  fastjson       a lenient reader for fastjson bodies (bare numeric and object map keys)
  acl            the ACL signature (AccessKey / Signature extFields)
  connection     one asyncio connection: request table, timeouts, one-way, callbacks
  client         connections per address, reconnects, the request hook
  models, namesrv, broker   typed admin calls
"""
